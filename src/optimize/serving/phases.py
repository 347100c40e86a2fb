"""The endpoint lifecycle as data (moved by `optimize.jobs.lifecycle.transition`)."""

from __future__ import annotations

from enum import StrEnum

from optimize.jobs.lifecycle import Lifecycle
from optimize.store.tables import Endpoint


class EndpointPhase(StrEnum):
    AWAITING_CAPACITY = "AWAITING_CAPACITY"  # waiting for a device of its profile (a serving slot on a cpu)
    STARTING = "STARTING"  # its worker loads the base model and the adapters
    READY = "READY"  # answers requests for every model whose adapter is loaded
    FAILED = "FAILED"  # ended with a reason
    DELETED = "DELETED"  # taken down by a user, or after its idle timeout


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
