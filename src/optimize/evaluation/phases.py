"""The evaluation lifecycle as data (moved by `optimize.jobs.lifecycle.transition`)."""

from __future__ import annotations

from optimize.jobs.lifecycle import Lifecycle
from optimize.schemas.phases import EvaluationPhase  # the phases a run's reward check reads too
from optimize.store.tables import Evaluation

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
