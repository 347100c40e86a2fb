"""The pipeline lifecycle as data: PENDING until the scheduler's next tick, RUNNING while its server step moves it on
stage by stage, then COMPLETED, FAILED (a resume takes it back to RUNNING) or CANCELLED."""

from __future__ import annotations

from optimize.jobs.lifecycle import Lifecycle
from optimize.schemas.phases import PipelinePhase
from optimize.store.tables import Pipeline

TERMINAL = frozenset({PipelinePhase.COMPLETED, PipelinePhase.FAILED, PipelinePhase.CANCELLED})
OPEN = frozenset({PipelinePhase.PENDING, PipelinePhase.RUNNING})

PIPELINE = Lifecycle(
    kind="pipeline", phases=PipelinePhase, table=Pipeline, terminal=TERMINAL,
    transitions={
        PipelinePhase.PENDING: frozenset({PipelinePhase.RUNNING, PipelinePhase.FAILED, PipelinePhase.CANCELLED}),
        PipelinePhase.RUNNING: frozenset({PipelinePhase.COMPLETED, PipelinePhase.FAILED, PipelinePhase.CANCELLED}),
        PipelinePhase.COMPLETED: frozenset(),
        PipelinePhase.FAILED: frozenset({PipelinePhase.RUNNING}),  # a resume starts the failed stage again
        PipelinePhase.CANCELLED: frozenset(),
    })
