"""Query parameters shared by routes, so one rule (bounds and refusal wording) holds wherever they appear."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query

MAX_LIST_LIMIT = 1_000_000

# `?limit=` on every list route: a whole number from 1 to MAX_LIST_LIMIT; anything else (0, -5, 1e30, 10**30) is
# refused 422 by the same validation, naming `limit`, before the route reads anything.
Limit = Annotated[int | None, Query(
    ge=1, le=MAX_LIST_LIMIT,
    description=f"How many items to answer at most: a whole number from 1 to {MAX_LIST_LIMIT} (default: all)")]
