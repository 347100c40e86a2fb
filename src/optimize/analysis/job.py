"""Analyses as a job kind of the kernel: no device, a worker measuring rows. A lost worker, or a server restart
while it measured, queues it again (within three attempts), since measuring is repeatable."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session

from optimize.analysis import service
from optimize.analysis.states import ANALYSIS, AnalysisPhase
from optimize.core.refs import parse_reference
from optimize.jobs.kinds import JobKind, Readable, Recovery
from optimize.jobs.leases import Grant
from optimize.jobs.lifecycle import transition
from optimize.registry.datasets import examples_objects, resolve_reference
from optimize.store.tables import Analysis, JobLease


class AnalysisKind(JobKind):
    name = "analysis"
    lifecycle = ANALYSIS
    waiting = AnalysisPhase.PENDING
    granted = AnalysisPhase.RUNNING
    completed = AnalysisPhase.DONE
    pool = None
    on_restart = Recovery.REQUEUE
    on_lost = Recovery.REQUEUE
    reason_column = "reason"

    def request(self, row: Analysis) -> tuple[str, int]:
        return "", 0

    def on_grant(self, session: Session, row: Analysis, lease: JobLease, grant: Grant) -> dict[str, Any]:
        return {"attempt": lease.attempt, "started_at": lease.granted_at, "progress": {}}  # measured afresh

    def requeue(self, deployment: Any, session: Session, row: Analysis, reason: str) -> bool:
        return transition(session, ANALYSIS, row, AnalysisPhase.PENDING, note=reason, started_at=None)

    def fail(self, deployment: Any, session: Session, row: Analysis, reason: str) -> bool:
        return transition(session, ANALYSIS, row, AnalysisPhase.FAILED, reason=reason[:4000])

    def outputs(self, row: Analysis) -> dict[str, Any]:
        """Its `report`: the analysis a run's length check reads (the run's edges name it)."""
        return {"report": {"analysisId": row.id, "lengthsSha256": row.lengths_sha256}}

    def start_upstream(self, deployment: Any, inputs: dict[str, Any],
                       waited_by: Callable[[Session, str], None] | None = None) -> None:
        """The analysis of `inputs["dataset"]` under the base model `inputs["model"]` (a run's length check waits
        for it), started unless one is kept."""
        service.start_analysis(deployment, inputs["dataset"], inputs["model"], waited_by=waited_by)

    def readable_blobs(self, deployment: Any, session: Session, row: Analysis) -> Readable:
        """The shards of the dataset version it measures (it writes its lengths, and reads nothing back)."""
        _found, version = resolve_reference(session, parse_reference(row.dataset_reference))
        return Readable(frozenset(o["sha256"] for o in examples_objects(session, version.digest))
                        | {image["sha256"] for image in version.images or []})

    def worker_spec(self, deployment, job_id, token, body):
        return service.job_spec(deployment, job_id, token)

    def worker_progress(self, deployment, job_id, token, body):
        return service.report_progress(deployment, job_id, token, body)

    def worker_result(self, deployment, job_id, token, body):
        return service.finish(deployment, job_id, token, body)


KIND = AnalysisKind()
