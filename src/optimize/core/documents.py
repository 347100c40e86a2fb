"""Nested documents (a plan's config, an overrides document) read as their leaves: each value by its dotted path."""

from __future__ import annotations

from typing import Any


def leaves(document: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted paths of a nested document's leaves (an empty mapping is a leaf of its own)."""
    found: dict[str, Any] = {}
    for key, value in document.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            found.update(leaves(value, path + "."))
        else:
            found[path] = value
    return found
