"""Endpoints as a job kind of the kernel: one device from the serving pool (on a cpu profile, a slot of its own,
so a resident model never blocks training), held until deleted. A server restart starts an endpoint again once;
a lost worker fails it with the reason. Idle endpoints are taken down at the scheduler's ticks, and an endpoint
serving a model by an alias follows the alias's moves there (`serving.following`)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from optimize.jobs.kinds import JobKind, Readable, Recovery
from optimize.serving import endpoints, following
from optimize.serving.phases import ENDPOINT, EndpointPhase
from optimize.store.tables import Endpoint


class EndpointKind(JobKind):
    name = "endpoint"
    project_work = True
    lifecycle = ENDPOINT
    waiting = EndpointPhase.AWAITING_CAPACITY
    granted = EndpointPhase.STARTING
    pool = "serving"
    on_restart = Recovery.REQUEUE
    on_lost = Recovery.FAIL
    restart_reason = "the server restarted; the endpoint starts again"

    def requeue(self, deployment: Any, session: Session, row: Endpoint, reason: str) -> bool:
        return endpoints.requeue(session, row, reason)

    def fail(self, deployment: Any, session: Session, row: Endpoint, reason: str) -> bool:
        return endpoints.end(session, row, EndpointPhase.FAILED, reason[:4000])

    def describe_holder(self, row: Endpoint) -> str:
        from optimize.core.clock import as_utc, utcnow

        if row.phase != EndpointPhase.READY:
            return f"endpoint {row.id[:12]} ({row.phase.replace('_', ' ').title()})"
        idle = (utcnow() - as_utc(row.last_request_at or row.ready_at or row.created_at)).total_seconds()
        return f"endpoint {row.id[:12]} (idle {idle / 60:.0f} min)"

    def housekeeping(self, deployment: Any) -> None:
        endpoints.take_down_idle(deployment)
        if following.follow_moves(deployment):  # an alias an endpoint follows moved: its new version is attached
            endpoints.forget_routes(deployment)

    def readable_blobs(self, deployment: Any, session: Session, row: Endpoint) -> Readable:
        """The files of the adapters attached to it now (a detached adapter is no longer read)."""
        return Readable(manifests=frozenset(a["manifestDigest"].removeprefix("sha256:") for a in row.adapters or []
                                            if a.get("manifestDigest")))

    def worker_spec(self, deployment, job_id, token, body):
        return endpoints.job_spec(deployment, job_id, token)

    def worker_heartbeat(self, deployment, job_id, token, body):
        return endpoints.heartbeat(deployment, job_id, token, body)

    def worker_result(self, deployment, job_id, token, body):
        return endpoints.finish(deployment, job_id, token, body)


KIND = EndpointKind()
