"""The executor protocol: how the kernel starts, finds and stops the worker process of a job attempt.

The scheduler decides what runs where (leases over pools of devices); an executor only carries it out:
`launch` a worker for a grant, say whether a job's worker is `alive`, `kill` it (returning once none is left,
so no device is granted while an earlier holder may still run on it), `reattach` to a worker started by an
earlier server process, and report every exit through the `on_exit` callback it was built with. A cluster's
executor also says which devices its live nodes offer now (`online`), which the scheduler grants from, and the
most of each profile one node offers (`most_on_one_node`): a job's devices are all on one node.

Two executors: `local_executor` (worker processes on this host) and `ray_executor` (on a Ray cluster's nodes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from optimize.jobs.devices import DeviceProfile
from optimize.jobs.leases import Grant

# (kind, job id, lease token, why it ended) — called from the executor's own threads
ExitCallback = Callable[[str, str, str, str], None]


class Executor(Protocol):
    name: str
    stopping: bool  # the server is shutting down: exits now are not their jobs' failures
    shares_grants: bool  # one worker process may serve several jobs granted together (`Grant.shared_with`)

    def launch(self, kind: str, job_id: str, grant: Grant) -> None: ...

    def alive(self, kind: str, job_id: str) -> bool: ...

    def kill(self, kind: str, job_id: str, others_go_on: bool = False) -> bool:
        """Stop the job's worker and return once it is gone (False: it outlived the wait); with `others_go_on`, a
        worker that also serves jobs still holding its devices is left to them (this job's work stops by its
        lease)."""
        ...

    def reattach(self, kind: str, job_id: str, token: str) -> None: ...

    def online(self) -> list[DeviceProfile] | None:
        """The profiles the executor's machines offer now (a cluster's live nodes), or None: every declared device
        is there (one machine)."""
        ...

    def most_on_one_node(self) -> dict[str, int] | None:
        """The most devices of each profile one live node offers (a job's devices are all on one node), or None on
        one machine."""
        ...

    def nodes(self) -> list[dict[str, Any]] | None:
        """The machines of a cluster, for `training capacity`; None on one machine."""
        ...

    def shutdown(self, keep: set[str]) -> None:
        """Stop the workers of every kind not in `keep` (kinds whose workers outlive the server)."""
        ...
