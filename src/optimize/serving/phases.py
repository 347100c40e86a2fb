"""The endpoint lifecycle as data (moved by `optimize.jobs.lifecycle.transition`)."""

from __future__ import annotations

from optimize.jobs.lifecycle import Lifecycle
from optimize.schemas.phases import EndpointPhase
from optimize.store.tables import Endpoint

ACTIVE = frozenset({EndpointPhase.AWAITING_CAPACITY, EndpointPhase.STARTING, EndpointPhase.READY})  # open
SERVED = frozenset({EndpointPhase.STARTING, EndpointPhase.READY})  # a worker holds its device
TERMINAL = frozenset({EndpointPhase.FAILED, EndpointPhase.DELETED})

ENDPOINT = Lifecycle(
    kind="endpoint", phases=EndpointPhase, table=Endpoint, active=SERVED, terminal=TERMINAL,
    transitions={
        EndpointPhase.AWAITING_CAPACITY: frozenset({EndpointPhase.STARTING, EndpointPhase.FAILED,
                                                    EndpointPhase.DELETED}),
        # back to AWAITING_CAPACITY: the server restarted, and the endpoint starts again once
        EndpointPhase.STARTING: frozenset({EndpointPhase.READY, EndpointPhase.FAILED, EndpointPhase.DELETED,
                                           EndpointPhase.AWAITING_CAPACITY}),
        EndpointPhase.READY: frozenset({EndpointPhase.FAILED, EndpointPhase.DELETED,
                                        EndpointPhase.AWAITING_CAPACITY}),
        EndpointPhase.FAILED: frozenset({EndpointPhase.DELETED}),  # a user deletes it from view
        EndpointPhase.DELETED: frozenset(),
    })
