"""What a job kind declares: its lifecycle, the phases a grant moves it between, the pool of devices it draws
on, its recovery policy, and the few things only it knows (what to request, what a grant sets, how it goes back
to waiting from its newest resumable point, how it fails, the blobs its worker may read, and the handlers of its
worker's routes).

The kernel (scheduler, reaper, recovery, internal routes) works on these declarations only, as the server registers
them (`jobs.registry`); a new kind is a subclass in its own package plus one entry in each process's table of kinds
(`api.kinds`, `cli.kinds`, `worker.kinds`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from optimize.blobs.manifests import listed_files
from optimize.core.clock import iso
from optimize.jobs.leases import Grant, extend, fence
from optimize.jobs.lifecycle import Lifecycle, transition
from optimize.jobs.server_steps import ServerStep
from optimize.store.tables import JobLease

LOST = "worker lost"  # how the end reason of an attempt whose worker was lost begins


class Recovery(StrEnum):
    REATTACH = "reattach"  # a worker still running keeps its lease and reconnects; a dead one is requeued
    REQUEUE = "requeue"  # back to waiting, from its newest resumable point, within its attempts budget
    FAIL = "fail"  # ends FAILED with the reason


# a worker route handler: (deployment, job id, lease token, request body) -> answer
Handler = Callable[[Any, str, str, dict[str, Any]], Any]


@dataclass(frozen=True)
class Readable:
    """The blobs a job's worker may read (GET …/blobs/{sha256}): the digests its spec names (a dataset's shards)
    and manifests (a save's or a model version's: JSON listing `files` by `sha256`), readable with every file they
    list."""

    blobs: frozenset[str] = frozenset()
    manifests: frozenset[str] = frozenset()

    def allows(self, sha256: str, store: Any) -> bool:
        """Whether the worker may read `sha256`; a manifest is read from `store` only when the digest is not named
        directly, and each manifest once per process (its digest names its bytes)."""
        if sha256 in self.blobs or sha256 in self.manifests:
            return True
        return any(sha256 in (listed_files(store, manifest) or ()) for manifest in self.manifests)


class JobKind:
    name: ClassVar[str]
    lifecycle: ClassVar[Lifecycle]
    waiting: ClassVar[StrEnum]  # where it waits for a grant
    granted: ClassVar[StrEnum]  # where a grant moves it
    completed: ClassVar[StrEnum | None] = None  # where it has completed and its outputs are there (else COMPLETED)
    pool: ClassVar[str | None] = "training"  # the devices it draws on; None: it needs none
    on_restart: ClassVar[Recovery] = Recovery.REQUEUE  # a server start found its worker's lease open
    on_lost: ClassVar[Recovery] = Recovery.FAIL  # its worker died or stopped heart-beating
    max_attempts_default: ClassVar[int] = 3
    restart_reason: ClassVar[str] = "the server restarted"
    project_work: ClassVar[bool] = False  # its jobs belong to a training project (an archive waits for them)
    server_step: ClassVar[ServerStep | None] = None  # what the server finishes itself once the worker ended
    # False: the server does all of its work (a comparison waits for its evaluations, then scores them): once its
    # edges let it go, the scheduler moves it to `granted`, its server step's phase, with no lease and no worker
    worker: ClassVar[bool] = True

    # --- what the scheduler asks -----------------------------------------------------------------------------

    def request(self, row: Any) -> tuple[str, int]:
        """(device profile, device count) the job needs; count 0 when it needs none (a kind with no pool may keep no
        profile at all: a pipeline's stages claim theirs)."""
        return (row.device_profile, 1) if self.pool else (getattr(row, "device_profile", None), 0)

    def before_grant(self, deployment: Any, session: Session, row: Any) -> bool:
        """A check the job passes before it may claim devices (False: not yet, or it was refused)."""
        return True

    def companions(self, session: Session, row: Any) -> list[Any] | None:
        """Other waiting jobs of this kind that may be granted the devices granted to `row`, beside it, and served
        by the same worker process (runs sharing one loaded base); oldest first; none by default. None: `row` waits a
        moment longer for jobs that may join it (their submissions are under way)."""
        return []

    def waiting_reason(self, session: Session, row: Any) -> str | None:
        """What keeps the job waiting besides devices (shown by `get` and `--wait`)."""
        return None

    def describe_holder(self, row: Any) -> str:
        """The job as the holder of a device another job waits for."""
        return f"{self.name} {row.id[:12]} ({row.phase.replace('_', ' ').title()})"

    def never_fits(self, row: Any, profiles: list[Any]) -> str:
        """Why the job can never be granted on this deployment's devices."""
        return (f"no device of profile {row.device_profile!r} exists on this deployment, so the {self.name} can "
                "never be scheduled")

    def on_grant(self, session: Session, row: Any, lease: JobLease, grant: Grant) -> dict[str, Any]:
        """Columns set with the move to the granted phase."""
        return {"attempt": lease.attempt, "devices": grant.devices}

    def attempt_number(self, row: Any) -> int:
        return (row.attempt or 0) + 1

    def hold_kind(self, row: Any) -> str:
        """The kind a device hold shows in `capacity` (a run shows its method)."""
        return self.name

    def max_attempts(self, row: Any) -> int:
        return self.max_attempts_default

    # --- what the job graph asks (`jobs.graph`) ----------------------------------------------------------------

    def completed_phase(self) -> StrEnum | None:
        """The phase in which its job completed: the jobs waiting for it may go on and take its outputs (None: its
        jobs never complete, as an endpoint serves until it is taken down, so no job can wait for one)."""
        return self.completed or self.lifecycle.phases.__members__.get("COMPLETED")

    def start_upstream(self, deployment: Any, inputs: dict[str, Any],
                       waited_by: Callable[[Session, str], None] | None = None) -> None:
        """Start (or keep) a job of this kind that another job waits for, from `inputs`; `waited_by(session, job id)`
        records the waiting job's edge (`jobs.graph`) in the transaction that starts it. How one kind starts
        another's work without importing it; a kind that is not started this way refuses."""
        raise NotImplementedError(f"a {self.name} is not started as another job's upstream")

    def outputs(self, row: Any) -> dict[str, Any]:
        """What a completed job gives the jobs that wait for it, by name (an analysis's `report`)."""
        return {}

    # --- what recovery asks ------------------------------------------------------------------------------------

    def lost_attempts(self, session: Session, row: Any) -> int:
        """How many of its attempts ended with their worker lost."""
        return session.scalar(select(func.count()).select_from(JobLease).where(
            JobLease.kind == self.name, JobLease.job_id == row.id, JobLease.end_reason.startswith(LOST))) or 0

    def requeue(self, deployment: Any, session: Session, row: Any, reason: str) -> bool:
        """Back to `waiting` from its newest resumable point."""
        raise NotImplementedError

    reason_column: ClassVar[str] = "failure_reason"

    def fail(self, deployment: Any, session: Session, row: Any, reason: str) -> bool:
        return transition(session, self.lifecycle, row, self.lifecycle.phases["FAILED"],
                          **{self.reason_column: reason[:4000]})

    # --- what its worker calls -------------------------------------------------------------------------------

    def readable_blobs(self, deployment: Any, session: Session, row: Any) -> Readable:
        """The blobs its worker may read, as its spec (and heartbeat answers) name them now: its inputs, and any of
        its own outputs it reads back. Every other digest is refused (403 `forbidden`), so a lease reads only the
        data of the job it serves."""
        return Readable()

    # `worker_<action>(deployment, job_id, token, body)` methods answer POST /v1/internal/jobs/{kind}/{id}/<action>
    # (`worker_spec` answers the GET of the job itself); each fences the lease in its own transaction.

    def housekeeping(self, deployment: Any) -> None:
        """Work of the kind's own the scheduler does at every tick (an endpoint's idle take-down)."""

    def handler(self, action: str) -> Handler | None:
        return getattr(self, f"worker_{action}", None) if action.isidentifier() else None

    def worker_heartbeat(self, deployment: Any, job_id: str, token: str, body: dict[str, Any]) -> dict[str, Any]:
        with deployment.store.transaction() as session:
            row, lease = fence(session, self.lifecycle, job_id, token)
            extend(lease, deployment.lease_seconds)
            return {"leaseExpiresAt": iso(lease.expires_at), "phase": row.phase, **self.instructions(row)}

    def instructions(self, row: Any) -> dict[str, Any]:
        """What the worker reads from every heartbeat answer beyond its phase."""
        return {}
