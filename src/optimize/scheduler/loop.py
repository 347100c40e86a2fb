"""The scheduler: admits queued runs, evaluations and endpoints onto free devices of the profile and count they ask for, and reaps
attempts whose worker stopped heart-beating.

A grant is one transaction: the device holds (primary key per device, so no device has two holders), the new
attempt with its lease, and the run's move to PREPARING. Holds are released only when the attempt ends. Work
that the current devices can never hold fails with the reason, also when the inventory changed since it was
queued (a restart with other devices). Before its devices are claimed, a run's rows are checked against the
dataset analyses it waits for (training.lengths).
"""

from __future__ import annotations

import logging
import secrets
import threading
from datetime import timedelta

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from optimize.core.clock import as_utc, utcnow
from optimize.deployment import Training
from optimize.scheduler.devices import devices as all_devices
from optimize.evaluation import service as evaluations
from optimize.serving import endpoints
from optimize.store.events import record as record_event
from optimize.store.tables import DeviceHold, Endpoint, Evaluation, Run, RunAttempt
from optimize.training.attempts import expired_attempts, fail_run, holder, lose_attempt
from optimize.training.lengths import Subject, evaluate, record, refusal
from optimize.training.phases import RunPhase, transition

log = logging.getLogger("optimize.scheduler")
TICK_SECONDS = 1.0


class Scheduler:
    def __init__(self, training: Training) -> None:
        self.training = training
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="scheduler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - the loop must outlive one bad tick; the next one retries
                log.exception("scheduler tick failed")
            self._wake.wait(TICK_SECONDS)
            self._wake.clear()

    def tick(self) -> None:
        self.reap()
        self.admit()
        self.admit_evaluations()
        self.admit_endpoints()

    def reap(self) -> None:
        lost = [(run_id, token, reason, lose_attempt) for run_id, token, reason in expired_attempts(self.training)]
        lost += [(item, token, reason, evaluations.lose) for item, token, reason in evaluations.expired(self.training)]
        lost += [(item, token, reason, endpoints.lose) for item, token, reason in endpoints.expired(self.training)]
        for job_id, token, reason, lose in lost:
            if lose(self.training, job_id, token, reason):
                log.warning("job %s: worker lost (%s)", job_id, reason)
                if self.training.launcher is not None:
                    self.training.launcher.kill(job_id)
        for endpoint_id in endpoints.take_down_idle(self.training):
            log.info("endpoint %s: taken down while idle", endpoint_id)
            if self.training.launcher is not None:
                self.training.launcher.kill(endpoint_id)

    def admit_evaluations(self) -> None:
        self._admit_single(Evaluation, "QUEUED", "RUNNING", evaluations.holder, "evaluation",
                           self.training.launcher and self.training.launcher.launch_evaluation)

    def admit_endpoints(self) -> None:
        self._admit_single(Endpoint, "AWAITING_CAPACITY", "STARTING", endpoints.holder, "endpoint",
                           self.training.launcher and self.training.launcher.launch_endpoint)

    def _admit_single(self, table, waiting: str, granted: str, holder_of, kind: str, launch) -> None:
        """Jobs on one device each (evaluations, endpoints), oldest first."""
        with self.training.store.transaction() as session:
            queued = session.scalars(select(table.id).where(table.phase == waiting).order_by(table.created_at)).all()
        for item_id in queued:
            grant = self._place_single(table, item_id, waiting, granted, holder_of(item_id), kind)
            if grant is not None and launch:
                launch(item_id, *grant)

    def _place_single(self, table, item_id: str, waiting: str, granted: str, subject: str, kind: str
                      ) -> tuple[str, list[str], str] | None:
        """One device of the job's profile, held until it ends: (token, [device], profile kind); None while none
        is free."""
        profiles = {p.name: p for p in self.training.profiles}
        try:
            with self.training.store.transaction() as session:
                item = session.get(table, item_id)
                if item is None or item.phase != waiting:
                    return None
                profile = profiles.get(item.device_profile)
                if profile is None:
                    item.phase, item.finished_at = "FAILED", utcnow()
                    item.failure_reason = (f"no device of profile {item.device_profile!r} exists on this deployment, "
                                           f"so the {kind} can never be scheduled")
                    record_event(session, subject, "phase", phase="FAILED", reason=item.failure_reason)
                    return None
                free = _free_devices(session, profile)
                if not free:
                    return None
                now, token = utcnow(), secrets.token_hex(16)
                session.add(DeviceHold(device_id=free[0], subject=subject, kind=kind, project=item.project, since=now))
                moved = session.execute(update(table).where(table.id == item.id, table.phase == waiting).values(
                    phase=granted, attempt=item.attempt + 1, devices=[free[0]], lease_token=token,
                    lease_expires_at=now + timedelta(seconds=self.training.lease_seconds))).rowcount == 1
                if not moved:
                    raise _MovedOn  # cancelled or deleted meanwhile
                record_event(session, subject, "phase", phase=granted)
                return token, [free[0]], profile.kind
        except (IntegrityError, _MovedOn):
            return None

    def admit(self) -> None:
        with self.training.store.transaction() as session:
            queued = session.scalars(select(Run.id).where(Run.phase == RunPhase.QUEUED.value)
                                     .order_by(Run.created_at)).all()
        for run_id in queued:
            launch = self._place(run_id)
            if launch is not None and self.training.launcher is not None:
                self.training.launcher.launch_run(run_id, *launch)

    def _place(self, run_id: str) -> tuple[str, list[str], str] | None:
        """Grant devices to one queued run if they are free; returns (token, devices, profile kind)."""
        profiles = {p.name: p for p in self.training.profiles}
        try:
            with self.training.store.transaction() as session:
                run = session.get(Run, run_id)
                if run is None or run.phase != RunPhase.QUEUED.value:
                    return None
                profile = profiles.get(run.device_profile)
                if profile is None or profile.devices < run.device_count:
                    fail_run(session, run, _never_fits(run, self.training.profiles))
                    return None
                if not self._lengths_checked(session, run):
                    return None
                free = _free_devices(session, profile)
                if len(free) < run.device_count:
                    return None  # waits for devices
                chosen = free[: run.device_count]
                now = utcnow()
                for device in chosen:
                    session.add(DeviceHold(device_id=device, subject=holder(run.id), kind=run.method,
                                           project=run.project, since=now))
                token = secrets.token_hex(16)
                number = run.attempt + 1
                session.add(RunAttempt(run_id=run.id, number=number, lease_token=token, devices=chosen,
                                       lease_expires_at=now + timedelta(seconds=self.training.lease_seconds),
                                       state="active", started_at=now))
                session.flush()
                # the new attempt shows its own progress; only the save it resumes from carries over
                if not transition(session, run, RunPhase.PREPARING, attempt=number,
                                  progress={"rowsDone": 0, "rowsTotal": run.dataset_rows,
                                            "savedStep": (run.progress or {}).get("savedStep")}):
                    raise _MovedOn  # cancelled meanwhile: the holds and the attempt must not be kept
                return token, chosen, profile.kind
        except (IntegrityError, _MovedOn):
            return None  # another grant took a device first, or the run moved on; the next tick looks again


    def _lengths_checked(self, session, run: Run) -> bool:
        """The length and template check before the claim: False while the run waits for its analyses (or was
        refused by them); after the wait limit the run goes on with the check marked as not run."""
        check = run.length_check or {}
        if check.get("status") != "waiting":
            return True
        config = run.resolved["config"]
        subjects = [Subject(d["role"], d["dataset"], digest) for d, digest in
                    zip(check["datasets"], [run.dataset_digest, run.validation_digest], strict=False)]
        sections, state = evaluate(session, self.training.blobs, subjects, run.base_entry_id, run.base_commit,
                                   config["maxSeqLength"], config["data"]["truncation"])
        reason = refusal(sections, config["data"]["truncation"], config["maxSeqLength"], run.base_entry_id)
        if reason:
            fail_run(session, run, f"the run is refused before it claims a device: {reason}")
            return False
        if state == "waiting":
            waited = (utcnow() - as_utc(run.created_at)).total_seconds()
            if waited < self.training.analysis_wait_seconds:
                return False
            state = "notRun"
        run.length_check = record(sections, state)
        return True


def _free_devices(session, profile) -> list[str]:
    held = set(session.scalars(select(DeviceHold.device_id)))
    return [d.device_id for d in all_devices([profile]) if d.device_id not in held]


class _MovedOn(Exception):
    """The run left QUEUED while it was being granted devices."""


def _never_fits(run: Run, profiles) -> str:
    have = ", ".join(f"{p.name} ({p.devices} device{'s' if p.devices != 1 else ''})" for p in profiles) or "none"
    if not any(p.name == run.device_profile for p in profiles):
        return (f"no device of profile {run.device_profile!r} exists on this deployment, so the run can never be "
                f"scheduled; profiles here: {have}. Set execution.deviceProfile to one of them")
    return (f"the run asks for {run.device_count} devices of profile {run.device_profile!r}, more than this "
            f"deployment has ({have}), so it can never be scheduled. Ask for fewer devices (execution.gpus)")
