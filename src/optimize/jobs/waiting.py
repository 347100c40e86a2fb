"""What a waiting job waits for, in words: the holders of the devices it needs (e.g. "waiting for the cpu device
held by endpoint 3f2a1b2c3d4e (idle 8 min)"), what its kind keeps it waiting on (a run's dataset analyses), or the
upstream jobs its edges wait for (`jobs.graph`)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from optimize.jobs import graph, registry
from optimize.jobs.devices import pool_devices
from optimize.store.tables import DeviceHold


def waiting_for(session: Session, deployment: Any, kind_name: str, row: Any) -> str | None:
    """None unless the job is waiting for something a user can see."""
    kind = registry.kind(kind_name)
    if row.phase != kind.waiting.value:
        return None
    own = kind.waiting_reason(session, row) or graph.readiness(session, kind_name, row.id).waiting
    if own:
        return own
    profile_name, count = kind.request(row)
    profile = next((p for p in deployment.profiles if p.name == profile_name), None)
    if not count or profile is None:
        return None
    devices = pool_devices(profile, kind.pool or "")
    holds = session.scalars(select(DeviceHold).where(DeviceHold.device_id.in_(devices))
                            .order_by(DeviceHold.since)).all()
    if any(hold.subject == f"{kind_name}:{row.id}" for hold in holds):
        # granted a moment ago: the devices are its own until its worker starts and the phase moves on
        return "its devices are granted; its worker is starting"
    if deployment.online is not None and deployment.online.get(profile.name, 0) < count:
        return (f"waiting for nodes that offer {count} {profile.name} device(s): the cluster's live nodes offer "
                f"{deployment.online.get(profile.name, 0)}")
    if not deployment.fits_one_node(profile.name, count):
        return (f"waiting for a node that offers {count} {profile.name} devices (a job's devices are all on one "
                f"node): the most one live node offers is {deployment.one_node.get(profile.name, 0)}")
    if len(devices) - len(holds) >= count:
        return "waiting for the scheduler to grant the free devices"
    noun = (f"the {profile.name} device" if len(devices) == 1
            else f"{count} of the {len(devices)} {profile.name} devices")
    holders = sorted({_holder(session, hold.subject) for hold in holds})
    return f"waiting for {noun} held by {', '.join(holders)}"


def _holder(session: Session, subject: str) -> str:
    kind_name, _, job_id = subject.partition(":")
    try:
        kind = registry.kind(kind_name)
    except KeyError:
        return subject
    row = session.get(kind.lifecycle.table, job_id)
    return kind.describe_holder(row) if row is not None else f"{kind_name} {job_id[:12]}"
