"""The run lifecycle as data: phases, allowed transitions, and the one guarded `transition`.

QUEUED → PREPARING → TRAINING → COMPLETED | FAILED | CANCELLED. A pause (PAUSING → PAUSED) leaves the run's
identity in place; resuming starts a new attempt through QUEUED again. Nothing else sets a run's phase.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session

from optimize.core.clock import iso, utcnow
from optimize.store.events import record
from optimize.store.tables import Run


class RunPhase(StrEnum):
    QUEUED = "QUEUED"  # accepted; waiting for devices
    PREPARING = "PREPARING"  # devices held; the worker reads, checks and renders the rows
    TRAINING = "TRAINING"  # optimizer updates
    PAUSING = "PAUSING"  # a pause was accepted; the worker is saving or stopping
    PAUSED = "PAUSED"  # stopped with its devices released; resumes as a new attempt
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


TERMINAL = frozenset({RunPhase.COMPLETED, RunPhase.FAILED, RunPhase.CANCELLED})
OPEN = frozenset(RunPhase) - TERMINAL
ACTIVE = frozenset({RunPhase.PREPARING, RunPhase.TRAINING, RunPhase.PAUSING})  # a worker holds devices

TRANSITIONS: dict[RunPhase, frozenset[RunPhase]] = {
    RunPhase.QUEUED: frozenset({RunPhase.PREPARING, RunPhase.FAILED, RunPhase.CANCELLED}),
    RunPhase.PREPARING: frozenset({RunPhase.TRAINING, RunPhase.PAUSING, RunPhase.FAILED, RunPhase.CANCELLED}),
    RunPhase.TRAINING: frozenset({RunPhase.COMPLETED, RunPhase.PAUSING, RunPhase.FAILED, RunPhase.CANCELLED}),
    # a pause that reaches the worker after its last update ends in COMPLETED
    RunPhase.PAUSING: frozenset({RunPhase.PAUSED, RunPhase.COMPLETED, RunPhase.FAILED, RunPhase.CANCELLED}),
    RunPhase.PAUSED: frozenset({RunPhase.QUEUED, RunPhase.CANCELLED}),
    RunPhase.COMPLETED: frozenset(),
    RunPhase.FAILED: frozenset(),
    RunPhase.CANCELLED: frozenset(),
}


def transition(session: Session, run: Run, to: RunPhase, **values: Any) -> bool:
    """Compare-and-set the run's phase from the phase it was read in; records the time spent in each phase and
    an event. Returns False (and changes nothing) when the run moved on meanwhile."""
    expected = RunPhase(run.phase)
    if to not in TRANSITIONS[expected]:
        raise ValueError(f"a run cannot go from {expected} to {to}")
    now = utcnow()
    times = {k: list(v) for k, v in (run.phase_times or {}).items()}
    spans = times.setdefault(to.value, [])
    for phase_spans in times.values():
        for span in phase_spans:
            if span[1] is None:
                span[1] = iso(now)
    spans.append([iso(now), None if to not in TERMINAL else iso(now)])
    if to in TERMINAL:
        values.setdefault("finished_at", now)
    statement = update(Run).where(Run.id == run.id, Run.phase == expected.value)
    changed = session.execute(statement.values(phase=to.value, phase_times=times, **values)).rowcount == 1
    if changed:
        record(session, f"run:{run.id}", "phase", phase=to.value, reason=values.get("failure_reason"))
        session.refresh(run)
    return changed
