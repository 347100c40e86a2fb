"""Time in one place, always UTC."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)


def as_utc(moment: datetime) -> datetime:
    """A stored time as an aware UTC datetime (SQLite hands back naive ones)."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def from_iso(stamp: str) -> datetime:
    """A time as the API writes it (`…Z`), back as an aware datetime."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def unix_seconds(moment: datetime) -> int:
    """A stored time as whole seconds since the epoch, as OpenAI's objects write their times."""
    return int(as_utc(moment).timestamp())


def iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return as_utc(moment).isoformat().replace("+00:00", "Z")
