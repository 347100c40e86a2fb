"""Curations as a job kind of the kernel: one device of their profile, from the training pool, granted to one
worker that runs the judge (none for a judge an endpoint serves: the worker asks it through the server). A server
restart or a lost worker queues a curation again, and it goes on from the verdicts it saved; its server step
(`jobs.server_steps`) registers the kept candidates of those that reached ASSEMBLING."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from optimize.curation import service
from optimize.curation.phases import CURATION, CurationPhase
from optimize.jobs.kinds import JobKind, Readable, Recovery
from optimize.jobs.server_steps import ServerStep
from optimize.store.tables import Curation


class CurationKind(JobKind):
    name = "curation"
    project_work = True
    lifecycle = CURATION
    waiting = CurationPhase.QUEUED
    granted = CurationPhase.RUNNING
    pool = "training"
    on_restart = Recovery.REQUEUE
    on_lost = Recovery.REQUEUE
    restart_reason = "the server restarted; the curation goes on from the verdicts it saved"
    server_step = ServerStep(CurationPhase.ASSEMBLING, service.assemble, "assemble")

    def request(self, row: Curation) -> tuple[str, int]:
        """One device of its profile, for the judge its worker loads; none for a judge an endpoint serves."""
        return row.device_profile, 0 if row.judge.get("endpoint") else 1

    def requeue(self, deployment: Any, session: Session, row: Curation, reason: str) -> bool:
        return service.requeue(session, row, reason)

    def readable_blobs(self, deployment: Any, session: Session, row: Curation) -> Readable:
        """Its sessions' candidates (a blob each, named by the session hash) and the judge adapter's files."""
        manifest = service.judge_manifest(row)
        return Readable(service.session_blobs(row), frozenset({manifest} if manifest else set()))

    def outputs(self, row: Curation) -> dict[str, Any]:
        """Its `dataset`: the version its assembly registered (reference, digest, rows), there once it completed."""
        return {"dataset": row.registered}

    def worker_spec(self, deployment, job_id, token, body):
        return service.job_spec(deployment, job_id, token)

    def worker_verdicts(self, deployment, job_id, token, body):
        return service.add_verdicts(deployment, job_id, token, body)

    def worker_judge(self, deployment, job_id, token, body):
        return service.ask_endpoint(deployment, job_id, token, body)

    def worker_result(self, deployment, job_id, token, body):
        return service.finish(deployment, job_id, token, body)


KIND = CurationKind()
