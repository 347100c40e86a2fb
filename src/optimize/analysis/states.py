"""The analysis lifecycle as data (moved by `optimize.jobs.lifecycle.transition`)."""

from __future__ import annotations

from optimize.jobs.lifecycle import Lifecycle
from optimize.schemas.phases import AnalysisPhase  # the phases a run's length check reads too
from optimize.store.tables import Analysis

TERMINAL = frozenset({AnalysisPhase.DONE, AnalysisPhase.FAILED})

ANALYSIS = Lifecycle(
    kind="analysis", phases=AnalysisPhase, table=Analysis, active=frozenset({AnalysisPhase.RUNNING}),
    terminal=TERMINAL,
    transitions={
        AnalysisPhase.PENDING: frozenset({AnalysisPhase.RUNNING, AnalysisPhase.FAILED}),
        # back to PENDING: its worker was lost, or the server restarted while it ran
        AnalysisPhase.RUNNING: frozenset({AnalysisPhase.DONE, AnalysisPhase.FAILED, AnalysisPhase.PENDING}),
        AnalysisPhase.DONE: frozenset(),
        AnalysisPhase.FAILED: frozenset({AnalysisPhase.PENDING}),  # requested again (unless it refused the rows)
    })
