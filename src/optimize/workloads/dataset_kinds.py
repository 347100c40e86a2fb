"""What a dataset of each kind holds, in the words refusals use (imports nothing, so worker-side modules read it
too)."""

from __future__ import annotations

HOLDS = {"chat": "chat rows", "preference": "preference pairs", "prepared": "prepared token rows"}
