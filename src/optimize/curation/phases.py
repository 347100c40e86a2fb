"""The curation lifecycle as data (moved by `optimize.jobs.lifecycle.transition`).

QUEUED waits for a device; RUNNING judges on it; ASSEMBLING has released the device and registers the kept
candidates; it ends COMPLETED with the dataset version registered, FAILED (nothing kept, the registry refused the
rows, a refusal) or CANCELLED.
"""

from __future__ import annotations

from optimize.jobs.lifecycle import Lifecycle
from optimize.schemas.phases import CurationPhase
from optimize.store.tables import Curation

P = CurationPhase
TERMINAL = frozenset({P.COMPLETED, P.FAILED, P.CANCELLED})
OPEN = frozenset({P.QUEUED, P.RUNNING, P.ASSEMBLING})

CURATION = Lifecycle(
    kind="curation", phases=CurationPhase, table=Curation, active=frozenset({P.RUNNING}),
    terminal=TERMINAL, settled=frozenset(),
    transitions={
        P.QUEUED: frozenset({P.RUNNING, P.FAILED, P.CANCELLED}),
        # back to QUEUED: its worker was lost or the server restarted; it goes on from the verdicts it saved
        P.RUNNING: frozenset({P.ASSEMBLING, P.FAILED, P.CANCELLED, P.QUEUED}),
        # the registration is the server's and short: a cancel then would leave a version half decided
        P.ASSEMBLING: frozenset({P.COMPLETED, P.FAILED}),
        P.COMPLETED: frozenset(),
        P.FAILED: frozenset(),
        P.CANCELLED: frozenset(),
    })
