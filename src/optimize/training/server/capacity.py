"""`training capacity`: pools with free, granted and queued devices, each device's holder, and the claims (granted
holds and queued runs), read from the store so it shows what the scheduler decides on; on a cluster, its nodes and
the devices each offers (a pool's `online`: what the live nodes offer now)."""

from __future__ import annotations

from collections import defaultdict

from sqlalchemy import select

from optimize.core.access import current, only_visible, visible_projects
from optimize.core.clock import iso
from optimize.deployment import Deployment
from optimize.jobs.devices import SERVING, pool_devices
from optimize.jobs.devices import devices as all_devices
from optimize.projects.quotas import quota_usage
from optimize.projects.service import find_project
from optimize.schemas.catalog import Capacity
from optimize.store.tables import DeviceHold, Project, Run
from optimize.training.server.phases import RunPhase


def capacity(deployment: Deployment, project: str | None = None) -> Capacity:
    """Pools and devices as they are; claims and quotas of the project asked for, else of every project the
    caller's token sees (a limited token sees only its own projects' claims)."""
    with deployment.store.transaction() as session:
        if project is not None:
            project = find_project(session, project).name
        holds = session.scalars(select(DeviceHold).order_by(DeviceHold.since)).all()
        queued = session.scalars(select(Run).where(Run.phase == RunPhase.QUEUED.value).order_by(Run.created_at)).all()
        names = [project] if project else [name for name in session.scalars(
            only_visible(select(Project.name).where(Project.archived.is_(False)), visible_projects(Project.name))
            .order_by(Project.name))]
        quotas = quota_usage(session, deployment.quotas, names)
    held_by = {h.device_id: h for h in holds}
    granted: dict[str, list[DeviceHold]] = defaultdict(list)
    for hold in holds:
        granted[hold.subject].append(hold)
    waiting = defaultdict(int)
    for run in queued:
        waiting[run.device_profile] += run.device_count
    pools = []
    for profile in deployment.profiles:
        purposes = [profile.pool] + ([SERVING] if profile.kind == "cpu" else [])  # a cpu keeps slots for serving
        for pool in purposes:
            names = pool_devices(profile, pool)
            busy = sum(1 for name in names if name in held_by)
            online = deployment.online.get(profile.name, 0) if deployment.online is not None else len(names)
            pools.append({"pool": pool, "profile": profile.name, "kind": profile.kind, "online": online,
                          "accelerator": profile.accelerator, "memoryGiB": profile.memory_gib, "declared": len(names),
                          "free": max(0, min(len(names), online) - busy), "granted": busy,
                          "queued": waiting[profile.name] if pool != SERVING
                          else 0})
    device_rows = [{"device": d.device_id, "profile": d.profile, "pool": d.pool,
                    "held": d.device_id in held_by,
                    "heldBy": held_by[d.device_id].subject if d.device_id in held_by else None}
                   for d in all_devices(deployment.profiles)]
    claims = [{"kind": items[0].kind.upper(), "subject": subject, "for": subject.split(":", 1)[1],
               "project": items[0].project, "devices": [h.device_id for h in items],
               "profile": items[0].device_id.split(":", 1)[0], "state": "GRANTED", "since": iso(items[0].since)}
              for subject, items in granted.items()]
    claims += [{"kind": run.method.upper(), "subject": f"run:{run.id}", "for": run.id, "project": run.project,
                "devices": [], "count": run.device_count, "profile": run.device_profile, "state": "QUEUED",
                "since": iso(run.created_at)} for run in queued]
    limits = current()
    claims = [c for c in claims if (project is None or c["project"] == project)
              and (limits is None or limits.sees_project(c["project"]))]
    executor = deployment.executor
    return Capacity(pools=pools, devices=device_rows, claims=claims, projects=quotas,
                    executor=executor.name if executor is not None else None,
                    nodes=executor.nodes() if executor is not None else None,  # a cluster's machines; None on one
                    envelopes="strict" if deployment.catalog.strict_envelopes else "advisory", warnings=[])
