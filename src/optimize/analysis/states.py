"""The analysis lifecycle as data: phases, allowed transitions, and the one guarded `transition`."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session

from optimize.store.events import record
from optimize.store.tables import Analysis


class AnalysisPhase(StrEnum):
    PENDING = "pending"  # accepted; its worker is starting
    RUNNING = "running"  # the worker is measuring rows
    DONE = "done"  # the report is kept
    FAILED = "failed"  # ended with a reason; started again on request unless it refused the dataset


TERMINAL = frozenset({AnalysisPhase.DONE, AnalysisPhase.FAILED})
TRANSITIONS: dict[AnalysisPhase, frozenset[AnalysisPhase]] = {
    AnalysisPhase.PENDING: frozenset({AnalysisPhase.RUNNING, AnalysisPhase.FAILED}),
    AnalysisPhase.RUNNING: frozenset({AnalysisPhase.DONE, AnalysisPhase.FAILED}),
    AnalysisPhase.DONE: frozenset(),
    AnalysisPhase.FAILED: frozenset({AnalysisPhase.PENDING}),
}


def transition(session: Session, analysis_id: str, expected: AnalysisPhase, to: AnalysisPhase,
               held_by: str | None, **values: Any) -> bool:
    """Compare-and-set the phase (and lease); returns False when the analysis moved on meanwhile."""
    if to not in TRANSITIONS[expected]:
        raise ValueError(f"an analysis cannot go from {expected} to {to}")
    statement = update(Analysis).where(Analysis.id == analysis_id, Analysis.phase == expected.value)
    if held_by is not None:
        statement = statement.where(Analysis.lease_token == held_by)
    changed = session.execute(statement.values(phase=to.value, **values)).rowcount == 1
    if changed:
        record(session, f"analysis:{analysis_id}", to.value, reason=values.get("reason"))
    return changed
