"""Leases: the one grant / heartbeat / expiry / fencing implementation every job kind uses.

A grant writes the lease and the holds of its devices in one transaction (a device's primary key keeps it to
one holder, so two grants of one device cannot both commit). Every worker call is fenced: it names its lease
token, and a token that is not the job's open lease, or a job no longer in an active phase, is answered 409
`lease_lost`. Ending a lease releases its devices; only the kernel ends leases (leaving an active phase, or the
reaper after the executor confirmed the worker is gone).

Jobs granted together share a device (`Grant.shared_with`: runs trained on one loaded base, one worker process
serving them all): each has its own lease listing the device, and the one hold belongs to whichever of them is still
open — ending one lease hands the hold to another open lease on the device, and only the last one releases it.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from optimize.core.clock import as_utc, utcnow
from optimize.core.errors import LeaseLost
from optimize.store.tables import DeviceHold, JobLease


@dataclass(frozen=True)
class Member:
    """Another job the same worker process serves on a shared grant: its id, lease token and attempt."""

    job_id: str
    token: str
    attempt: int


@dataclass(frozen=True)
class Grant:
    """What a worker is launched with: its lease token, the devices it may use and which attempt of the job it is."""

    token: str
    devices: list[str]
    profile_kind: str  # gpu or cpu: how the executor hands the devices over
    attempt: int = 1  # the lease's attempt number: the executor keeps a log per attempt
    shared_with: tuple[Member, ...] = ()  # jobs of the same kind granted the same devices, served by the same worker


def grant(session: Session, kind: str, job_id: str, attempt: int, devices: list[str], lease_seconds: float,
          project: str | None = None, hold_kind: str | None = None, hold: bool = True) -> JobLease:
    """A new open lease for the job with holds on its devices (IntegrityError when a device is taken); `hold` False
    for a job joining another's grant, whose holds cover it."""
    now = utcnow()
    lease = JobLease(token=secrets.token_hex(16), kind=kind, job_id=job_id, attempt=attempt, devices=list(devices),
                     granted_at=now, expires_at=now + timedelta(seconds=lease_seconds))
    session.add(lease)
    for device in devices if hold else ():
        session.add(DeviceHold(device_id=device, subject=f"{kind}:{job_id}", kind=hold_kind or kind,
                               project=project, since=now))
    session.flush()
    return lease


def open_lease(session: Session, kind: str, job_id: str) -> JobLease | None:
    return session.scalar(select(JobLease).where(JobLease.kind == kind, JobLease.job_id == job_id,
                                                 JobLease.ended_at.is_(None)))


def fence(session: Session, lifecycle: Any, job_id: str, token: str) -> tuple[Any, JobLease]:
    """The job and its lease while `token` holds it in an active phase; else LeaseLost (409 lease_lost)."""
    lease = session.get(JobLease, token) if isinstance(token, str) and token else None
    row = session.get(lifecycle.table, job_id) if lease is not None else None
    if (lease is None or row is None or lease.ended_at is not None or lease.kind != lifecycle.kind
            or lease.job_id != job_id or lifecycle.phases(row.phase) not in lifecycle.active):
        raise LeaseLost(f"{lifecycle.kind} {job_id} is no longer held by this worker")
    return row, lease


def reported(won: bool, lifecycle: Any, job_id: str) -> None:
    """A move the job's worker reported under the lease `fence` found must have won: else its lease ended since
    (the reaper, a user's cancel), so LeaseLost (409 lease_lost) — nothing of the report is kept, as the transaction
    rolls back, and the worker stops."""
    if not won:
        raise LeaseLost(f"{lifecycle.kind} {job_id} is no longer held by this worker")


def extend(lease: JobLease, lease_seconds: float) -> None:
    lease.expires_at = utcnow() + timedelta(seconds=lease_seconds)


def end(session: Session, lease: JobLease, reason: str) -> float:
    """End an open lease and release its devices; the device-seconds it held."""
    if lease.ended_at is not None:
        return 0.0
    now = utcnow()
    lease.ended_at, lease.end_reason = now, reason[:4000]
    _release(session, lease.kind, lease.job_id)
    return (now - as_utc(lease.granted_at)).total_seconds() * len(lease.devices)


def end_all(session: Session, kind: str, job_id: str, reason: str) -> bool:
    """End the job's open leases and release its devices; True where a job granted beside it holds them on (its
    worker, which serves that job too, goes on)."""
    for lease in session.scalars(select(JobLease).where(JobLease.kind == kind, JobLease.job_id == job_id,
                                                        JobLease.ended_at.is_(None))).all():
        end(session, lease, reason)
    _release(session, kind, job_id)
    return _others_on(session, kind, job_id)


def _release(session: Session, kind: str, job_id: str) -> None:
    """The job's device holds go to another open lease on the same device (a job granted beside it that runs on),
    or are deleted: the device is free."""
    holds = session.scalars(select(DeviceHold).where(DeviceHold.subject == f"{kind}:{job_id}")).all()
    if not holds:
        return
    sharers = [lease for lease in open_leases(session) if lease.kind == kind and lease.job_id != job_id]
    for hold in holds:
        heir = next((lease for lease in sharers if hold.device_id in (lease.devices or [])), None)
        if heir is None:
            session.delete(hold)
        else:
            hold.subject = f"{heir.kind}:{heir.job_id}"
    session.flush()


def _others_on(session: Session, kind: str, job_id: str) -> bool:
    """Whether another job of the kind holds an open lease on a device of the job's latest lease (a job granted
    beside it, served by the same worker)."""
    latest = session.scalars(select(JobLease).where(JobLease.kind == kind, JobLease.job_id == job_id)
                             .order_by(JobLease.granted_at.desc())).first()
    devices = set(latest.devices or []) if latest is not None else set()
    return bool(devices) and any(lease.kind == kind and lease.job_id != job_id and devices & set(lease.devices or [])
                                 for lease in open_leases(session))


def open_leases(session: Session) -> list[JobLease]:
    return list(session.scalars(select(JobLease).where(JobLease.ended_at.is_(None))))


def expired(session: Session) -> list[JobLease]:
    now = utcnow()
    return [lease for lease in open_leases(session) if as_utc(lease.expires_at) < now]


def device_seconds(session: Session, kind: str, job_ids: list[str]) -> float:
    """The device seconds the jobs' leases held (an open lease counts up to now; a job that holds no device, one)."""
    now = utcnow()
    leases = session.scalars(select(JobLease).where(JobLease.kind == kind, JobLease.job_id.in_(job_ids)))
    return sum((as_utc(lease.ended_at or now) - as_utc(lease.granted_at)).total_seconds()
               * max(len(lease.devices or []), 1) for lease in leases)
