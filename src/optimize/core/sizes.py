"""Byte sizes written by people (`64MiB`, `1.5GiB`, `1000000`) and back."""

from __future__ import annotations

import re

from optimize.core.errors import Invalid

_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
    "ki": 1024, "kib": 1024, "mi": 1024**2, "mib": 1024**2, "gi": 1024**3, "gib": 1024**3,
}
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*")


def parse_size(text: str) -> int:
    match = _SIZE.fullmatch(text)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _UNITS:
        raise Invalid(f"size {text!r} is not a byte size", hint="write it like 64MiB, 1GiB or 1000000")
    size = int(float(match.group(1)) * _UNITS[unit])
    if size < 1:
        raise Invalid(f"size {text!r} must be at least one byte")
    return size


def format_size(size: int) -> str:
    """The shortest exact binary spelling (`256MiB`), or bytes."""
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    return str(size)


def human_size(size: int) -> str:
    """A rounded, readable size for tables (`1.2 GiB`)."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"
