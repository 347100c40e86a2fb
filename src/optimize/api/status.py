"""`GET /v1/status`: the deployment at a glance, built from every kind's declaration (`jobs.registry`), the
capacity view and the endpoints' service; it reads every kind, so it lives above them.

Jobs, endpoints and queued work are those the caller's token sees (a token limited to projects sees only theirs);
the pools are the deployment's, as `training capacity` shows them.
"""

from __future__ import annotations

from sqlalchemy import func, select

from optimize.core.access import only_visible, visible_item
from optimize.core.clock import iso
from optimize.deployment import Deployment
from optimize.jobs.counts import phase_counts
from optimize.jobs.registry import kinds
from optimize.jobs.waiting import waiting_for
from optimize.schemas.status import KindCount, PhaseCount, Queue, QueuedJob, ServingEndpoint, Status
from optimize.serving.endpoints import list_endpoints
from optimize.serving.phases import SERVED
from optimize.training.server.capacity import capacity

QUEUE_SHOWN = 10  # the oldest queued jobs the answer names


def status(deployment: Deployment) -> Status:
    with deployment.store.transaction() as session:
        counts = phase_counts(session)
        jobs = [_kind_count(kind, counts[kind.name]) for kind in kinds()]
        queue = _queue(deployment, session)
    endpoints = [ServingEndpoint(endpoint_id=e.endpoint_id, project=e.project, phase=e.phase,
                                 models=[m.name for m in e.models],
                                 in_flight=e.load.in_flight if e.load is not None else None,
                                 queued=e.load.queued if e.load is not None else None)
                 for e in list_endpoints(deployment, None, "active") if e.phase in SERVED]
    return Status(jobs=jobs, devices=capacity(deployment).pools, endpoints=endpoints, queue=queue)


def _kind_count(kind, counted: dict[str, int]) -> KindCount:
    terminal = {phase.value for phase in kind.lifecycle.terminal}
    held = [(phase, count) for phase, count in counted.items() if count]
    phases = ([PhaseCount(phase=p, count=c, open=True) for p, c in held if p not in terminal]
              + [PhaseCount(phase=p, count=c, open=False) for p, c in held if p in terminal])
    return KindCount(kind=kind.name, open=sum(p.count for p in phases if p.open),
                     total=sum(p.count for p in phases), phases=phases)


def _queue(deployment: Deployment, session) -> Queue:
    """The jobs waiting in their kind's waiting phase for devices (kinds that need none are left out), oldest
    first."""
    total, oldest = 0, []
    for kind in kinds():
        if kind.pool is None:
            continue
        table = kind.lifecycle.table
        waiting = only_visible(select(table).where(getattr(table, kind.lifecycle.column) == kind.waiting.value),
                               visible_item(table))
        total += session.scalar(select(func.count()).select_from(waiting.subquery())) or 0
        oldest += [(row.created_at, kind, row)
                   for row in session.scalars(waiting.order_by(table.created_at).limit(QUEUE_SHOWN))]
    oldest.sort(key=lambda item: item[0])
    jobs = []
    for created, kind, row in oldest[:QUEUE_SHOWN]:
        profile, count = kind.request(row)
        jobs.append(QueuedJob(kind=kind.name, job_id=row.id, project=getattr(row, "project", None),
                              device_profile=profile, devices=count, since=iso(created),
                              waiting_for=waiting_for(session, deployment, kind.name, row)))
    return Queue(total=total, jobs=jobs)
