"""Dotted paths into nested JSON documents (`config.hyperparams.lora.rank`), as plans and settings name fields."""

from __future__ import annotations

from typing import Any


def lookup(document: Any, path: str) -> Any:
    """The value at `path`, or None where any part of it is missing."""
    node = document
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node
