"""Distillations as a job kind of the kernel: a device of their profile per replica, from the training pool, all
granted together to one worker (which runs a teacher on each). A server restart or a lost worker queues a
distillation again, and it goes on from the answers it saved; its server step (`jobs.server_steps`) registers the
rows of those that reached ASSEMBLING."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from optimize.distillation import service
from optimize.distillation.phases import DISTILLATION, DistillationPhase
from optimize.jobs.kinds import JobKind, Readable, Recovery
from optimize.jobs.server_steps import ServerStep
from optimize.registry.datasets import examples_objects
from optimize.store.tables import Distillation


class DistillationKind(JobKind):
    name = "distillation"
    project_work = True
    lifecycle = DISTILLATION
    waiting = DistillationPhase.QUEUED
    granted = DistillationPhase.RUNNING
    pool = "training"
    on_restart = Recovery.REQUEUE
    on_lost = Recovery.REQUEUE
    restart_reason = "the server restarted; the distillation goes on from the answers it saved"
    server_step = ServerStep(DistillationPhase.ASSEMBLING, service.assemble, "assemble")

    def request(self, row: Distillation) -> tuple[str, int]:
        return row.device_profile, row.settings.get("replicas", 1)

    def never_fits(self, row: Distillation, profiles: list[Any]) -> str:
        have = next((p.devices for p in profiles if p.name == row.device_profile), 0)
        return (f"replicas {row.settings.get('replicas', 1)} need as many devices of profile {row.device_profile!r}; "
                f"this deployment has {have}, so the distillation can never be scheduled")

    def requeue(self, deployment: Any, session: Session, row: Distillation, reason: str) -> bool:
        return service.requeue(session, row, reason)

    def readable_blobs(self, deployment: Any, session: Session, row: Distillation) -> Readable:
        """The shards of its source, a `bundle:` acceptance grader's archive, and the teacher adapter's files."""
        manifest = (row.teacher.get("manifestDigest") or "").removeprefix("sha256:")
        bundle = service.accept_grader_sha256(row)
        return Readable(frozenset(o["sha256"] for o in examples_objects(session, row.source_digest))
                        | ({bundle} if bundle else set()),
                        frozenset({manifest} if manifest else set()))

    def outputs(self, row: Distillation) -> dict[str, Any]:
        """Its `dataset`: the version its assembly registered (reference, digest, rows), there once it completed —
        a job taking it (`jobs.graph`) waits through the assembly, and ends with the rule's message if it failed."""
        return {"dataset": row.registered}

    def worker_spec(self, deployment, job_id, token, body):
        return service.job_spec(deployment, job_id, token)

    def worker_answers(self, deployment, job_id, token, body):
        return service.add_answers(deployment, job_id, token, body)

    def worker_smoke(self, deployment, job_id, token, body):
        return service.judge_smoke(deployment, job_id, token, body)

    def worker_result(self, deployment, job_id, token, body):
        return service.finish(deployment, job_id, token, body)


KIND = DistillationKind()
