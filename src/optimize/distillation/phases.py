"""The distillation lifecycle as data (moved by `optimize.jobs.lifecycle.transition`).

QUEUED waits for a device; RUNNING answers on it (first the smoke, then the rest: `smoke` says which); PAUSED
holds its saved answers and no device; ASSEMBLING has released the device and registers the accepted rows; it ends
COMPLETED with the dataset registered, FAILED (a failed smoke, no answer accepted, a refusal) or CANCELLED.
"""

from __future__ import annotations

from optimize.jobs.lifecycle import Lifecycle
from optimize.schemas.phases import DistillationPhase
from optimize.store.tables import Distillation

P = DistillationPhase
TERMINAL = frozenset({P.COMPLETED, P.FAILED, P.CANCELLED})
OPEN = frozenset({P.QUEUED, P.RUNNING, P.PAUSED, P.ASSEMBLING})

DISTILLATION = Lifecycle(
    kind="distillation", phases=DistillationPhase, table=Distillation, active=frozenset({P.RUNNING}),
    terminal=TERMINAL, settled=frozenset({P.PAUSED}),
    transitions={
        P.QUEUED: frozenset({P.RUNNING, P.PAUSED, P.FAILED, P.CANCELLED}),
        # back to QUEUED: its worker was lost or the server restarted; it goes on from the chunks it saved
        P.RUNNING: frozenset({P.ASSEMBLING, P.PAUSED, P.FAILED, P.CANCELLED, P.QUEUED}),
        P.PAUSED: frozenset({P.QUEUED, P.CANCELLED}),
        P.ASSEMBLING: frozenset({P.COMPLETED, P.FAILED}),
        P.COMPLETED: frozenset(),
        P.FAILED: frozenset(),
        P.CANCELLED: frozenset(),
    })
