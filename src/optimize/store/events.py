"""Append-only event rows: every change the registry makes is recorded with its subject."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from optimize.core.clock import utcnow
from optimize.store.tables import Event


def record(session: Session, subject: str, kind: str, **data: Any) -> None:
    session.add(Event(at=utcnow(), subject=subject, kind=kind, data=data))


def latest(session: Session, subject: str) -> int:
    """The id of the newest event of a subject (0 when none): a cursor that moves whenever the subject changes."""
    return session.scalar(select(func.max(Event.id)).where(Event.subject == subject)) or 0
