"""Time in one place (UTC), so tests can move it forward."""

from __future__ import annotations

from datetime import UTC, datetime

_offset_seconds = 0.0


def utcnow() -> datetime:
    from datetime import timedelta

    return datetime.now(UTC) + timedelta(seconds=_offset_seconds)


def advance(seconds: float) -> None:
    """Move the clock forward (tests only)."""
    global _offset_seconds
    _offset_seconds += seconds


def iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
