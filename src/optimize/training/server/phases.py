"""The run lifecycle and the attempt lifecycle, as data (moved by `optimize.jobs.lifecycle.transition`).

QUEUED → PREPARING → TRAINING → COMPLETED | FAILED | CANCELLED. A pause (PAUSING → PAUSED) leaves the run's
identity in place; resuming starts a new attempt through QUEUED again, as does a worker lost within the run's
attempts budget (PREPARING/TRAINING → QUEUED). Nothing else sets a run's phase.
"""

from __future__ import annotations

from enum import StrEnum

from optimize.jobs.lifecycle import Lifecycle
from optimize.schemas.phases import RunPhase  # the phases the throughput of completed runs reads too
from optimize.store.tables import Run, RunAttempt

TERMINAL = frozenset({RunPhase.COMPLETED, RunPhase.FAILED, RunPhase.CANCELLED})
OPEN = frozenset(RunPhase) - TERMINAL
ACTIVE = frozenset({RunPhase.PREPARING, RunPhase.TRAINING, RunPhase.PAUSING})  # a worker holds devices

RUN = Lifecycle(
    kind="run", phases=RunPhase, table=Run, active=ACTIVE, terminal=TERMINAL,
    settled=frozenset({RunPhase.PAUSED}),
    transitions={
        RunPhase.QUEUED: frozenset({RunPhase.PREPARING, RunPhase.FAILED, RunPhase.CANCELLED}),
        # back to QUEUED: its worker was lost and the run is tried again from its newest resumable save
        RunPhase.PREPARING: frozenset({RunPhase.TRAINING, RunPhase.PAUSING, RunPhase.QUEUED, RunPhase.FAILED,
                                       RunPhase.CANCELLED}),
        RunPhase.TRAINING: frozenset({RunPhase.COMPLETED, RunPhase.PAUSING, RunPhase.QUEUED, RunPhase.FAILED,
                                      RunPhase.CANCELLED}),
        # a pause that reaches the worker after its last update ends in COMPLETED
        RunPhase.PAUSING: frozenset({RunPhase.PAUSED, RunPhase.COMPLETED, RunPhase.FAILED, RunPhase.CANCELLED}),
        RunPhase.PAUSED: frozenset({RunPhase.QUEUED, RunPhase.CANCELLED}),
        RunPhase.COMPLETED: frozenset(),
        RunPhase.FAILED: frozenset(),
        RunPhase.CANCELLED: frozenset(),
    })


class AttemptState(StrEnum):
    ACTIVE = "active"  # its worker holds the run's lease and devices
    ENDED = "ended"  # completed, paused, failed, cancelled or lost; its device time is counted


ATTEMPT = Lifecycle(
    kind="run", phases=AttemptState, table=RunAttempt, active=frozenset({AttemptState.ACTIVE}),
    terminal=frozenset({AttemptState.ENDED}), column="state", subject_key="run_id", event="attempt-ended",
    transitions={AttemptState.ACTIVE: frozenset({AttemptState.ENDED}), AttemptState.ENDED: frozenset()})
