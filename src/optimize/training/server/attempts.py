"""How an attempt ends, and with it a run that fails or is tried again.

An attempt ends exactly once, through the attempt lifecycle: its lease ends, its devices are released and the
device time it held is added to the run's cost. A run whose worker was lost goes back to QUEUED from its newest
save holding training state. What the worker itself reports is `training.server.reports`.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete

from optimize.core.clock import as_utc, iso, utcnow
from optimize.jobs.lifecycle import transition
from optimize.store.tables import Run, RunAttempt, RunMetric
from optimize.training.server.phases import ATTEMPT, RUN, AttemptState, RunPhase
from optimize.training.server.retention import restore_point


def end_attempt(session, run: Run, attempt: RunAttempt, reason: str, by_worker: bool = False) -> None:
    """End the attempt (its lease and devices with it) and count the device time it held."""
    if attempt is None or AttemptState(attempt.state) is not AttemptState.ACTIVE:
        return
    now = utcnow()
    if transition(session, ATTEMPT, attempt, AttemptState.ENDED, by_worker=by_worker, note=reason, ended_at=now,
                  end_reason=reason[:4000]):
        held = (now - as_utc(attempt.started_at)).total_seconds() * len(attempt.devices)
        cost = dict(run.cost or {})
        cost["deviceSeconds"] = round(cost.get("deviceSeconds", 0.0) + held, 1)
        run.cost = cost


def current_attempt(session, run: Run) -> RunAttempt | None:
    """The run's newest attempt (active or ended); None before its first grant."""
    return session.get(RunAttempt, (run.id, run.attempt)) if run.attempt else None


def queue_from_newest_save(session, run: Run, why: dict[str, Any], **values: Any) -> bool:
    """Queue the run's next attempt from its newest save holding training state (from the start without one),
    recording in `resumed` what it restores and `why`; the updates after that save are trained again, so their
    metrics go. False when the run moved on meanwhile."""
    point = restore_point(session, run.id)
    restored: dict[str, Any] = {"requestedAt": iso(utcnow()), "attempt": run.attempt + 1, **why}
    if point is None:
        restored.update({"snapshotId": None, "step": 0, "optimizerState": False})
    else:
        restored.update({"snapshotId": point.id, "step": point.step, "fromAttempt": point.attempt,
                         "optimizerState": True})
    session.execute(delete(RunMetric).where(RunMetric.run_id == run.id, RunMetric.step > restored["step"]))
    return transition(session, RUN, run, RunPhase.QUEUED, resumed=restored,
                      progress={"savedStep": point.step if point else None}, **values)


def fail_run(session, run: Run, reason: str, by_worker: bool = False) -> bool:
    end_attempt(session, run, current_attempt(session, run), reason, by_worker)
    return transition(session, RUN, run, RunPhase.FAILED, by_worker=by_worker, failure_reason=reason[:4000],
                      cost=run.cost)


def requeue_run(session, run: Run, reason: str) -> bool:
    """Its worker was lost: queue a new attempt from the newest save holding training state (from the start
    without one); the updates after that save are trained again, so their metrics go."""
    end_attempt(session, run, current_attempt(session, run), reason)
    return queue_from_newest_save(session, run, {"afterLoss": reason}, note=reason, cost=run.cost)
