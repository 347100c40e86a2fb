"""Small text helpers for tables: ages, sizes, dashes for empty cells; cells shown with controls escaped."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.table import Table

from optimize.cli.safe_text import escape_controls
from optimize.core.clock import from_iso

DASH = "—"


def age(stamp: str | None) -> str:
    if not stamp:
        return DASH
    moment = from_iso(stamp)
    seconds = int((datetime.now(UTC) - moment).total_seconds())
    if seconds < 60:
        return f"{max(seconds, 0)}s ago"
    minutes = seconds // 60
    if minutes < 120:
        return f"{minutes}m ago"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m ago"
    return f"{hours // 24}d ago"


class _Table(Table):
    """A table whose text cells have terminal controls escaped (`safe_text`) before their widths are measured."""

    def add_row(self, *renderables, **kwargs) -> None:
        super().add_row(*(escape_controls(cell) if isinstance(cell, str) else cell for cell in renderables), **kwargs)


def table(*columns: str) -> Table:
    grid = _Table(box=None, pad_edge=False, header_style="bold")
    for column in columns:
        grid.add_column(column)
    return grid


def footer(shown: int, noun: str) -> str:
    return f"{shown} {noun}{'' if shown == 1 else 's'}."
