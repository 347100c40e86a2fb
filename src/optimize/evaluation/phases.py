"""The evaluation lifecycle as data (moved by `optimize.jobs.lifecycle.transition`)."""

from __future__ import annotations

from enum import StrEnum

from optimize.jobs.lifecycle import Lifecycle
from optimize.store.tables import Evaluation


class EvaluationPhase(StrEnum):
    QUEUED = "QUEUED"  # waiting for a device of its profile
    RUNNING = "RUNNING"  # its worker answers and grades the rows
    COMPLETED = "COMPLETED"  # every row answered; the report is kept
    FAILED = "FAILED"  # ended with a reason; its answers are kept for a retry
    CANCELLED = "CANCELLED"  # ended by a user


TERMINAL = frozenset({EvaluationPhase.COMPLETED, EvaluationPhase.FAILED, EvaluationPhase.CANCELLED})
OPEN = frozenset({EvaluationPhase.QUEUED, EvaluationPhase.RUNNING})

EVALUATION = Lifecycle(
    kind="evaluation", phases=EvaluationPhase, table=Evaluation, active=frozenset({EvaluationPhase.RUNNING}),
    terminal=TERMINAL,
    transitions={
        EvaluationPhase.QUEUED: frozenset({EvaluationPhase.RUNNING, EvaluationPhase.FAILED,
                                           EvaluationPhase.CANCELLED}),
        # back to QUEUED: its worker was lost or the server restarted; it goes on from the answers it holds
        EvaluationPhase.RUNNING: frozenset({EvaluationPhase.COMPLETED, EvaluationPhase.FAILED,
                                            EvaluationPhase.CANCELLED, EvaluationPhase.QUEUED}),
        # an ended evaluation is queued again by a retry
        EvaluationPhase.COMPLETED: frozenset({EvaluationPhase.QUEUED}),
        EvaluationPhase.FAILED: frozenset({EvaluationPhase.QUEUED}),
        EvaluationPhase.CANCELLED: frozenset({EvaluationPhase.QUEUED}),
    })
