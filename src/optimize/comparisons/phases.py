"""The comparison lifecycle as data (moved by `optimize.jobs.lifecycle.transition`): it waits in EVALUATING for its
evaluations (edges of the job graph), the scheduler moves it to SCORING once they have all ended, and the server's
step scores it there."""

from __future__ import annotations

from optimize.jobs.lifecycle import Lifecycle
from optimize.schemas.phases import ComparisonPhase
from optimize.store.tables import Comparison

TERMINAL = frozenset({ComparisonPhase.COMPLETED, ComparisonPhase.FAILED, ComparisonPhase.CANCELLED})
OPEN = frozenset({ComparisonPhase.EVALUATING, ComparisonPhase.SCORING})

COMPARISON = Lifecycle(
    kind="comparison", phases=ComparisonPhase, table=Comparison, terminal=TERMINAL,
    transitions={
        ComparisonPhase.EVALUATING: frozenset({ComparisonPhase.SCORING, ComparisonPhase.FAILED,
                                               ComparisonPhase.CANCELLED}),
        ComparisonPhase.SCORING: frozenset({ComparisonPhase.COMPLETED, ComparisonPhase.FAILED,
                                            ComparisonPhase.CANCELLED}),
        ComparisonPhase.COMPLETED: frozenset(),
        ComparisonPhase.FAILED: frozenset(),
        ComparisonPhase.CANCELLED: frozenset(),
    })
