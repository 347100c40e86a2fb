"""Pause, resume and cancel: what a user asks of a run after it was submitted.

A pause is recorded on the run (PAUSING) and read by its worker from its next heartbeat or progress answer;
the worker stops (after a save with `checkpoint: save`) and reports, and only then are its devices released
(PAUSED). A plan's `execution.pauseAtStep` is the same pause with `checkpoint: save`, asked by the plan: the
worker saves at that update and stops there, and the run records it (`pause.askedBy: plan`) when the worker says
so; a run pauses there once. A resume queues the run for a new attempt that restores the newest save holding
training state; the updates after that save are discarded with their metrics, so the resumed attempt trains them
again exactly.
"""

from __future__ import annotations

from sqlalchemy import select

from optimize.core.clock import iso, utcnow
from optimize.core.errors import Conflict, Refused
from optimize.deployment import Deployment
from optimize.jobs.lifecycle import decided, moved, transition
from optimize.projects.quotas import check_queue_room
from optimize.schemas import runs as answers
from optimize.schemas.outcomes import RunPause
from optimize.schemas.resolved import resolved_execution
from optimize.store.events import record
from optimize.store.tables import Event, Run, RunAttempt
from optimize.training.server.attempts import current_attempt, end_attempt, queue_from_newest_save
from optimize.training.server.phases import RUN, TERMINAL, RunPhase
from optimize.training.server.retention import restore_point
from optimize.training.server.runs import find_run
from optimize.training.server.views import run_view


def pause(deployment: Deployment, run_id: str, checkpoint: str) -> tuple[answers.Run, bool]:
    """Record a pause (`checkpoint` latest or save); returns (run, accepted now). The same pause sent again while
    pausing is not new."""

    def decide(session) -> tuple[answers.Run, bool]:
        run = find_run(session, run_id)
        phase = RunPhase(run.phase)
        short = run.id[:12]
        if phase is RunPhase.PAUSING:
            asked = (run.pause or {}).get("checkpoint")
            if asked != checkpoint:
                raise Conflict(f"run {short} is already pausing with --checkpoint {asked}; a pause with "
                               f"--checkpoint {checkpoint} cannot replace it",
                               hint=f"wait for it to pause: akka training runs wait {short}")
            return run_view(run, current_attempt(session, run)), False
        if phase is RunPhase.PAUSED:
            raise Refused(f"run {short} is PAUSED; there is nothing to pause",
                          hint=f"resume the run to train it again: akka training runs resume {short}",
                          phase=phase.value)
        if phase not in (RunPhase.PREPARING, RunPhase.TRAINING):
            hint = (f"it holds no devices yet; cancel it with: akka training runs cancel {short}"
                    if phase is RunPhase.QUEUED else "start a branch from one of its snapshots to train further")
            raise Refused(f"run {short} is {phase.value}; only a preparing or training run can be paused", hint=hint,
                          phase=phase.value)
        restorable = restore_point(session, run.id)
        if checkpoint == "latest" and restorable is None:
            raise Refused(f"run {short} has no save with its training state yet, so a latest pause would restart "
                          "it from the base model",
                          hint="pause with --checkpoint save to save at the next update and stop", phase=phase.value)
        now = utcnow()
        moved(transition(session, RUN, run, RunPhase.PAUSING, pause={
            "checkpoint": checkpoint, "attempt": run.attempt, "requestedAt": iso(now),
            "requestedAtStep": (run.progress or {}).get("observedStep"), "state": "pausing",
            "resourcesReleased": False}), f"run {short}")
        return run_view(run, current_attempt(session, run)), True

    return decided(deployment.store, decide)


PLAN_PAUSE = "plan-pause"  # the event recorded when a run pauses at its plan's execution.pauseAtStep


def pause_by_plan(session, run: Run, step: int | None) -> bool:
    """The run's worker stopped at update `step` for its plan's `execution.pauseAtStep`: record that pause, with
    `checkpoint: save`, as asked by the plan (PAUSING). False where `step` is not that update, the run is not
    training (a user's pause already recorded stays the run's) or it paused there before."""
    pause_at = resolved_execution(run.resolved).pause_at_step
    if pause_at is None or step != pause_at or run.phase != RunPhase.TRAINING.value or paused_by_plan(session, run):
        return False
    if not transition(session, RUN, run, RunPhase.PAUSING, by_worker=True, note=f"execution.pauseAtStep {step}",
                      pause={"checkpoint": "save", "askedBy": "plan", "attempt": run.attempt,
                             "requestedAt": iso(utcnow()), "requestedAtStep": step, "state": "pausing",
                             "resourcesReleased": False}):
        return False
    record(session, RUN.subject(run.id), PLAN_PAUSE, step=step)
    return True


def paused_by_plan(session, run: Run) -> bool:
    """The run has paused at its plan's execution.pauseAtStep already (a resumed attempt does not pause there
    again)."""
    return session.scalar(select(Event.id).where(Event.subject == RUN.subject(run.id), Event.kind == PLAN_PAUSE)
                          .limit(1)) is not None


def finish_pause(session, run: Run, attempt: RunAttempt, stop: RunPause, reason: str = "paused",
                 by_worker: bool = False) -> bool:
    """The worker stopped (or was lost while pausing): release its devices and record what it can resume from."""
    point = restore_point(session, run.id)
    stopped = stop.step
    pause_record = dict(run.pause or {})
    pause_record.update({"state": "paused", "pausedAt": iso(utcnow()), "stoppedAtStep": stopped,
                         "savedStep": point.step if point else None, "snapshotId": point.id if point else None,
                         "resourcesReleased": True})
    if pause_record.get("checkpoint") == "save" and (point is None or stopped is None or point.step < stopped):
        pause_record["saveFailed"] = stop.save_error or (
            f"the save at step {stopped} was not committed before the worker stopped" if stopped is not None
            else "the worker stopped before it saved")
    if reason != "paused":
        pause_record["endReason"] = reason
    end_attempt(session, run, attempt, reason, by_worker)
    return transition(session, RUN, run, RunPhase.PAUSED, by_worker=by_worker, pause=pause_record, cost=run.cost,
                      progress={**(run.progress or {}), "savedStep": point.step if point else None})


def resume(deployment: Deployment, run_id: str) -> answers.Run:
    """Queue a paused run for a new attempt from its newest resumable save."""

    def decide(session) -> answers.Run:
        run = find_run(session, run_id)
        phase = RunPhase(run.phase)
        short = run.id[:12]
        if phase is RunPhase.PAUSING:
            raise Conflict(f"run {short} is still pausing",
                           hint=f"wait for it to pause: akka training runs wait {short}")
        if phase is not RunPhase.PAUSED:
            raise Refused(f"run {short} is {phase.value}; only a paused run can be resumed", phase=phase.value)
        check_queue_room(session, run.project, deployment.quotas)
        moved(queue_from_newest_save(session, run, {"afterPause": run.pause}, pause=None), f"run {short}")
        return run_view(run)

    return decided(deployment.store, decide)


def cancel(deployment: Deployment, run_id: str) -> tuple[answers.Run, bool]:
    """Cancel a run in any unfinished phase; returns (run, cancelled now). Its worker, if any, is stopped."""

    def decide(session) -> tuple[answers.Run, bool]:
        run = find_run(session, run_id)
        phase = RunPhase(run.phase)
        if phase is RunPhase.CANCELLED:
            return run_view(run), False
        if phase in TERMINAL:
            raise Refused(f"run {run.id[:12]} is {phase.value}; there is nothing to cancel", phase=phase.value)
        end_attempt(session, run, current_attempt(session, run), "cancelled")
        # its worker, if any, is stopped once this commits
        moved(transition(session, RUN, run, RunPhase.CANCELLED, cost=run.cost), f"run {run.id[:12]}")
        record(session, RUN.subject(run.id), "cancelled", phase=phase.value)
        return run_view(run), True

    return decided(deployment.store, decide)
