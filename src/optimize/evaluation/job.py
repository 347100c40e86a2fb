"""Evaluations as a job kind of the kernel: one device of their profile from the training pool. A server restart
or a lost worker queues an evaluation again (a lost worker within three attempts), and it goes on from the
answers it holds."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from optimize.evaluation import service, standing
from optimize.evaluation.phases import EVALUATION, EvaluationPhase
from optimize.jobs.kinds import JobKind, Readable, Recovery
from optimize.registry.datasets import examples_objects, version_images
from optimize.store.tables import Evaluation


class EvaluationKind(JobKind):
    name = "evaluation"
    project_work = True
    lifecycle = EVALUATION
    waiting = EvaluationPhase.QUEUED
    granted = EvaluationPhase.RUNNING
    pool = "training"
    on_restart = Recovery.REQUEUE
    on_lost = Recovery.REQUEUE
    restart_reason = "the server restarted; the evaluation goes on from the answers it holds"

    def requeue(self, deployment: Any, session: Session, row: Evaluation, reason: str) -> bool:
        return service.requeue(session, row, reason)

    def housekeeping(self, deployment: Any) -> None:
        """The projects' standing evaluations of the model versions registered since they were set."""
        standing.housekeeping(deployment)

    def readable_blobs(self, deployment: Any, session: Session, row: Evaluation) -> Readable:
        """The shards of its dataset, the archive of its grader's scoring bundle, and the adapter files of the model
        it evaluates and of its judge."""
        models = [row.model, row.model.get("judge") or {}]
        blobs = {o["sha256"] for o in examples_objects(session, row.dataset_digest)}
        blobs |= {image["sha256"] for image in version_images(session, row.dataset_digest)}
        if row.model.get("graderBundle"):
            blobs.add(row.model["graderBundle"]["sha256"])
        return Readable(frozenset(blobs),
                        frozenset(m["manifestDigest"].removeprefix("sha256:") for m in models
                                  if m.get("manifestDigest")))

    def worker_spec(self, deployment, job_id, token, body):
        return service.job_spec(deployment, job_id, token)

    def worker_predictions(self, deployment, job_id, token, body):
        return service.add_predictions(deployment, job_id, token, body.get("items") or [])

    def worker_result(self, deployment, job_id, token, body):
        return service.finish(deployment, job_id, token, body)


KIND = EvaluationKind()
