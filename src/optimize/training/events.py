"""Following a run: its status now and the event cursor, then whether anything changed after a cursor.

The cursor is read before the status, so a change made while the status is read shows up in a later update
rather than being missed.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from optimize.deployment import Deployment
from optimize.store.tables import Event
from optimize.training.runs import find_run, run_status


def current(training: Deployment, run_id: str) -> tuple[dict[str, Any], int]:
    with training.store.transaction() as session:
        run = find_run(session, run_id)
        cursor = _latest(session, run.id)
        return run_status(training, session, run), cursor


def since(training: Deployment, run_id: str, cursor: int) -> tuple[bool, int, dict[str, Any] | None]:
    with training.store.transaction() as session:
        latest = _latest(session, run_id)
        if latest <= cursor:
            return False, cursor, None
        run = find_run(session, run_id)
        return True, latest, run_status(training, session, run)


def _latest(session, run_id: str) -> int:
    return session.scalar(select(func.max(Event.id)).where(Event.subject == f"run:{run_id}")) or 0
