"""Identifiers: random hex ids, named for their kind in JSON (`uploadId`, `runId`, …)."""

from __future__ import annotations

import secrets


def new_id() -> str:
    """A 32-hex-digit random id."""
    return secrets.token_hex(16)
