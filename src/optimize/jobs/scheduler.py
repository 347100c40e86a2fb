"""The scheduler: one loop that reaps expired leases and grants waiting jobs of every kind their devices.

A grant is one transaction: the lease with the holds on its devices (a device's primary key keeps it to one
holder) and the job's move to its granted phase; the worker is launched after the commit. Oldest first within a
kind. Work the deployment's devices can never hold fails with the reason (also when the inventory changed since
it was queued). Nothing is granted to a job while an edge of the job graph holds it (`jobs.graph.readiness`: an
upstream it waits for has not completed), and one whose upstream ended without completing ends by the graph's rule
(`graph.upstream_ended`). A kind may keep a job waiting before it claims anything (`before_grant`: a run's length
check, on the analyses its edges waited for). A job waiting in its kind's server-step phase has its step started
(`jobs.server_steps`: a distillation's assembly). A kind with no worker (`JobKind.worker`) is moved to its step's
phase as soon as its edges let it go.

A job's grant may take its kind's `companions` along, where the executor runs several jobs in one worker process
(`shares_grants`): each ready companion gets a lease of its own on the same devices in the same transaction, and
one worker is launched for them all (`Grant.shared_with`).
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from optimize.core.clock import iso
from optimize.core.crashpoints import crashpoint
from optimize.jobs import graph, leases, registry, server_steps
from optimize.jobs.devices import pool_devices
from optimize.jobs.kinds import JobKind
from optimize.jobs.leases import Grant, Member
from optimize.jobs.lifecycle import transition
from optimize.jobs.recovery import worker_lost
from optimize.store.tables import DeviceHold

log = logging.getLogger("optimize.scheduler")
TICK_SECONDS = 1.0


class Scheduler:
    def __init__(self, deployment: Any) -> None:
        self.deployment = deployment
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="scheduler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - the loop must outlive one bad tick; the next one retries
                log.exception("scheduler tick failed")
            self._wake.wait(TICK_SECONDS)
            self._wake.clear()

    def tick(self) -> None:
        self.deployment.refresh_inventory()  # a cluster's nodes come and go
        self.reap()
        for kind in registry.kinds():
            try:
                kind.housekeeping(self.deployment)
                server_steps.start_waiting(self.deployment, kind)
                self.admit(kind)
            except Exception:  # noqa: BLE001 - one kind's failure must not hold every kind after it back
                log.exception("scheduler tick failed for %s", kind.name)

    def reap(self) -> None:
        """Leases whose worker stopped heart-beating: the worker is killed, then its kind's policy applies."""
        seconds = self.deployment.lease_seconds
        with self.deployment.store.transaction() as session:
            lapsed = [(lease.kind, lease.job_id, lease.token, lease.expires_at) for lease in leases.expired(session)]
        for kind, job_id, token, expires_at in lapsed:
            reason = (f"no heartbeat from its worker since {iso(expires_at - timedelta(seconds=seconds))} "
                      f"(lease {seconds:g}s)")
            if worker_lost(self.deployment, kind, job_id, token, reason):
                log.warning("%s %s: worker lost (%s)", kind, job_id, reason)

    def admit(self, kind: JobKind) -> None:
        table = kind.lifecycle.table
        with self.deployment.store.transaction() as session:
            waiting = session.scalars(select(table.id).where(table.phase == kind.waiting.value)
                                      .order_by(table.created_at)).all()
        for job_id in waiting:
            grant = self._grant(kind, job_id)
            if grant is not None and self.deployment.executor is not None:
                self.deployment.executor.launch(kind.name, job_id, grant)

    def _grant(self, kind: JobKind, job_id: str) -> Grant | None:
        profiles = {p.name: p for p in self.deployment.profiles}
        try:
            with self.deployment.store.transaction() as session:
                row = session.get(kind.lifecycle.table, job_id)
                if row is None or row.phase != kind.waiting.value:
                    return None
                profile_name, count = kind.request(row)
                profile = profiles.get(profile_name)
                if count and (profile is None or profile.devices < count):
                    kind.fail(self.deployment, session, row, kind.never_fits(row, self.deployment.profiles))
                    return None
                edges = graph.readiness(session, kind.name, row.id)
                if edges.failed:
                    kind.fail(self.deployment, session, row, edges.failed)
                    return None
                if not edges.ready or not kind.before_grant(self.deployment, session, row):
                    return None
                if not kind.worker:  # the server's own work: on to its step, nothing to lease or launch
                    if not transition(session, kind.lifecycle, row, kind.granted):
                        log.info("%s %s moved on before its step", kind.name, row.id)  # cancelled: nothing to undo
                    return None
                crashpoint("scheduler.grant")  # fault tests: the server dies as a job it may grant is granted
                chosen: list[str] = []
                companions: list[Any] = []
                if count:
                    free = free_devices(session, profile, kind.pool, self.deployment.online)
                    if len(free) < count or not self.deployment.fits_one_node(profile.name, count):
                        return None  # waits for devices (on a cluster, for a node that has them all)
                    chosen = free[:count]
                    if getattr(self.deployment.executor, "shares_grants", False):
                        companions = kind.companions(session, row)
                        if companions is None:
                            return None  # others that may join it are being submitted
                lease = leases.grant(session, kind.name, row.id, kind.attempt_number(row), chosen,
                                     self.deployment.lease_seconds, project=getattr(row, "project", None),
                                     hold_kind=kind.hold_kind(row))
                grant = Grant(lease.token, chosen, profile.kind if count else "cpu", lease.attempt)
                if not transition(session, kind.lifecycle, row, kind.granted, **kind.on_grant(session, row, lease,
                                                                                              grant)):
                    raise _MovedOn  # cancelled meanwhile: the lease and holds must not be kept
                members = self._joined(session, kind, companions, grant)
                return Grant(grant.token, chosen, grant.profile_kind, grant.attempt, members)
        except (IntegrityError, _MovedOn):
            return None  # another grant took a device first, or the job moved on; the next tick looks again

    def _joined(self, session, kind: JobKind, companions: list[Any], grant: Grant) -> tuple[Member, ...]:
        """The companions that are ready now, each granted the same devices under a lease of its own (the holds stay
        the first job's, `leases`), to be served by its worker."""
        members = []
        for other in companions:
            edges = graph.readiness(session, kind.name, other.id)
            if edges.failed or not edges.ready or not kind.before_grant(self.deployment, session, other):
                continue  # a failed upstream ends it on its own tick
            lease = leases.grant(session, kind.name, other.id, kind.attempt_number(other), grant.devices,
                                 self.deployment.lease_seconds, hold=False)
            joined = Grant(lease.token, grant.devices, grant.profile_kind, lease.attempt)
            if not transition(session, kind.lifecycle, other, kind.granted,
                              **kind.on_grant(session, other, lease, joined)):
                raise _MovedOn
            members.append(Member(other.id, lease.token, lease.attempt))
        return tuple(members)


def free_devices(session, profile, pool: str | None, online: dict[str, int] | None = None) -> list[str]:
    """The device slots of the profile's pool no job holds; on a cluster (`online`), no more than its live nodes
    offer beyond what is held (Ray places each worker on a node with room, so the slots name no node)."""
    held = set(session.scalars(select(DeviceHold.device_id)))
    slots = pool_devices(profile, pool or "")
    free = [device for device in slots if device not in held]
    if online is not None:
        free = free[:max(0, online.get(profile.name, 0) - (len(slots) - len(free)))]
    return free


class _MovedOn(Exception):
    """The job left its waiting phase while it was being granted devices."""
