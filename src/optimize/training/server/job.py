"""Runs as a job kind of the kernel: a run attempt waits in QUEUED, is granted its devices into PREPARING, and its
worker trains it. Its worker outlives a server restart (reattach); a lost worker is requeued from the newest save
holding training state within `execution.maxAttempts`; before devices are claimed, its rows are checked against
the dataset analyses it waits for. Runs that state `execution.shareBase` are granted together, one worker training
them on one loaded base (`shared_base`).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from optimize.core.clock import as_utc, utcnow
from optimize.jobs.kinds import JobKind, Readable, Recovery
from optimize.jobs.leases import Grant
from optimize.registry.datasets import examples_objects, version_images
from optimize.schemas.outcomes import RunPause
from optimize.schemas.resolved import ResolvedReward, resolved_config, resolved_execution
from optimize.store.tables import JobLease, Run, RunAttempt, Snapshot
from optimize.training.admission.lengths import Subject, evaluate, record, refusal
from optimize.training.server import attempts, prediction, reports, shared_base
from optimize.training.server.lifecycle import finish_pause
from optimize.training.server.phases import RUN, RunPhase


class RunKind(JobKind):
    name = "run"
    project_work = True
    lifecycle = RUN
    waiting = RunPhase.QUEUED
    granted = RunPhase.PREPARING
    pool = "training"
    on_restart = Recovery.REATTACH
    on_lost = Recovery.REQUEUE

    def request(self, row: Run) -> tuple[str, int]:
        return row.device_profile, row.device_count

    def hold_kind(self, row: Run) -> str:
        return row.method

    def max_attempts(self, row: Run) -> int:
        return resolved_execution(row.resolved).max_attempts

    def never_fits(self, row: Run, profiles: list[Any]) -> str:
        have = ", ".join(f"{p.name} ({p.devices} device{'s' if p.devices != 1 else ''})" for p in profiles) or "none"
        if not any(p.name == row.device_profile for p in profiles):
            return (f"no device of profile {row.device_profile!r} exists on this deployment, so the run can never be "
                    f"scheduled; profiles here: {have}. Set execution.deviceProfile to one of them")
        return (f"the run asks for {row.device_count} devices of profile {row.device_profile!r}, more than this "
                f"deployment has ({have}), so it can never be scheduled. Ask for fewer devices (execution.gpus)")

    def companions(self, session: Session, row: Run) -> list[Run]:
        """Queued runs that train beside this one on one loaded base (`execution.shareBase`, `shared_base`)."""
        return shared_base.companions(session, row)

    def waiting_reason(self, session: Session, row: Run) -> str | None:
        check = row.length_check or {}
        if check.get("status") != "waiting":
            return None
        datasets = ", ".join(d["dataset"] for d in check.get("datasets") or [])
        return f"waiting for the analyses of {datasets}: its rows are checked before it claims a device"

    def describe_holder(self, row: Run) -> str:
        step = (row.progress or {}).get("observedStep")
        total = (row.progress or {}).get("totalSteps")
        at = f", step {step} of {total}" if step is not None and total else ""
        return f"run {row.id[:12]} ({row.phase.title()}{at})"

    def before_grant(self, deployment: Any, session: Session, row: Run) -> bool:
        """The length and template check before the claim, once its edges to its analyses no longer hold it (each
        done or failed, or the wait limit passed): False when they refused it, or while one it has no edge to (none
        existed when it was submitted) is still missing before the wait limit; after it the run goes on with the
        check marked as not run."""
        check = row.length_check or {}
        if check.get("status") != "waiting":
            prediction.settle(deployment, session, row)
            return True
        config = resolved_config(row.resolved["config"])
        subjects = [Subject(d["role"], d["dataset"], digest, {"longestRow": d.get("longest")}
                            if d["status"] == "prepared" else None) for d, digest in
                    zip(check["datasets"], [row.dataset_digest, row.validation_digest], strict=False)]
        sections, state = evaluate(session, deployment.blobs, subjects, row.base_entry_id, row.base_commit,
                                   config.max_seq_length, config.data.truncation)
        reason = refusal(sections, config.data.truncation, config.max_seq_length, row.base_entry_id)
        if reason:  # the check keeps the analyses that refused it, so lengthCheck says what the reason names
            row.length_check = record(sections, "refused")
            self.fail(deployment, session, row, f"the run is refused before it claims a device: {reason}")
            return False
        if state == "waiting":
            if (utcnow() - as_utc(row.created_at)).total_seconds() < deployment.analysis_wait_seconds:
                return False
            state = "notRun"
        row.length_check = record(sections, state)
        prediction.settle(deployment, session, row)  # its analysis is done now, or will not be before the claim
        return True

    def on_grant(self, session: Session, row: Run, lease: JobLease, grant: Grant) -> dict[str, Any]:
        session.add(RunAttempt(run_id=row.id, number=lease.attempt, lease_token=lease.token, devices=grant.devices,
                               state="active", started_at=lease.granted_at))
        session.flush()
        # the new attempt shows its own progress; only the save it resumes from carries over
        return {"attempt": lease.attempt, "progress": {"rowsDone": 0, "rowsTotal": row.dataset_rows,
                                                       "savedStep": (row.progress or {}).get("savedStep")}}

    def requeue(self, deployment: Any, session: Session, row: Run, reason: str) -> bool:
        if row.phase == RunPhase.PAUSING.value:  # it was stopping anyway: it pauses on what it committed
            return self._pause_instead(session, row, reason)
        return attempts.requeue_run(session, row, reason)

    def fail(self, deployment: Any, session: Session, row: Run, reason: str) -> bool:
        if row.phase == RunPhase.PAUSING.value:
            return self._pause_instead(session, row, reason)
        return attempts.fail_run(session, row, reason)

    def _pause_instead(self, session: Session, row: Run, reason: str) -> bool:
        return finish_pause(session, row, attempts.current_attempt(session, row),
                            RunPause(step=(row.progress or {}).get("observedStep")), reason=reason)

    def instructions(self, row: Run) -> dict[str, Any]:
        return reports.instructions(row)

    # --- its worker's calls ------------------------------------------------------------------------------------

    def readable_blobs(self, deployment: Any, session: Session, row: Run) -> Readable:
        """The shards of its training and validation datasets, the scoring bundles and judge adapters of its reward
        terms, and the files of the save it resumes from (its own) or, on a branch, starts from (its parent's) —
        what its spec names."""
        digests = [digest for digest in (row.dataset_digest, row.validation_digest) if digest]
        shards = frozenset(o["sha256"] for digest in digests for o in examples_objects(session, digest))
        shards |= {image["sha256"] for digest in digests for image in version_images(session, digest)}
        reward = resolved_config(row.resolved["config"]).reward
        terms = reward.terms if isinstance(reward, ResolvedReward) else []  # a reinforcement run's
        shards |= {term.bundle_sha256 for term in terms if term.bundle_sha256}
        saves = list((row.branch or {}).get("artifacts") or [])
        snapshot_id = (row.resumed or {}).get("snapshotId")
        snapshot = session.get(Snapshot, snapshot_id) if snapshot_id else None
        if snapshot is not None:
            saves += snapshot.artifacts or []
        manifests = {a["manifestDigest"].removeprefix("sha256:") for a in saves}
        manifests |= {term.judge_manifest_digest.removeprefix("sha256:") for term in terms
                      if term.judge_manifest_digest}  # a judge term's adapter
        return Readable(shards, frozenset(manifests))

    def worker_spec(self, deployment, job_id, token, body):
        return reports.job_spec(deployment, job_id, token)

    def worker_progress(self, deployment, job_id, token, body):
        return reports.report_progress(deployment, job_id, token, body)

    def worker_metrics(self, deployment, job_id, token, body):
        return reports.report_metrics(deployment, job_id, token, body.get("items") or [])

    def worker_rollouts(self, deployment, job_id, token, body):
        return reports.report_rollouts(deployment, job_id, token, body.get("records"))

    def worker_snapshots(self, deployment, job_id, token, body):
        return reports.commit_snapshot(deployment, job_id, token, body)

    def worker_result(self, deployment, job_id, token, body):
        return reports.finish(deployment, job_id, token, body)


KIND = RunKind()
