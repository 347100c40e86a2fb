"""Answers of runs, metrics and snapshots (`schemas.runs`: snake_case fields, camelCase JSON)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from optimize.core.clock import as_utc, iso, utcnow
from optimize.core.paths import lookup
from optimize.schemas import runs as answers
from optimize.schemas.common import BaseModelPin, DatasetPin
from optimize.schemas.progress import count_of
from optimize.schemas.resolved import resolved_execution
from optimize.store.tables import Run, RunAttempt, RunMetric, Snapshot
from optimize.training.methods import rewarded
from optimize.training.server.phases import TERMINAL, RunPhase
from optimize.training.server.prediction import prediction_json


def phase_millis(run: Run, now: datetime | None = None) -> dict[str, int]:
    """Time spent in each phase, summed over its spans (a phase still open counts up to now)."""
    now = now or utcnow()
    totals: dict[str, int] = {}
    for phase, spans in (run.phase_times or {}).items():
        total = 0
        for start, end in spans:
            begin = datetime.fromisoformat(start)
            finish = datetime.fromisoformat(end) if end else now
            total += int((as_utc(finish) - as_utc(begin)).total_seconds() * 1000)
        totals[phase] = total
    return totals


def _length_check(run: Run) -> dict[str, Any] | None:
    """The check as recorded; one a run ended without (cancelled or failed while it waited for its analyses)
    did not run."""
    check = run.length_check
    if check and check.get("status") == "waiting" and RunPhase(run.phase) in TERMINAL:
        return {**check, "status": "notRun"}
    return check


def run_view(run: Run, attempt: RunAttempt | None = None, settings: bool = False) -> answers.Run:
    millis = phase_millis(run)
    execution = resolved_execution(run.resolved)
    cost = dict(run.cost or {})
    held = cost.get("deviceSeconds")
    if held is None and attempt is not None:  # still running: an estimate of what it holds
        seconds = sum(millis.get(p, 0) for p in ("PREPARING", "TRAINING", "PAUSING")) / 1000
        cost["deviceSeconds"] = round(seconds * run.device_count, 1)
        cost["estimate"] = True
    cost["duration"] = {"waitingForDevices": millis.get("QUEUED", 0) / 1000,
                        "preparing": millis.get("PREPARING", 0) / 1000,
                        "training": millis.get("TRAINING", 0) / 1000}
    answer = answers.Run(
        run_id=run.id,
        submission_id=run.submission_id,
        project=run.project,
        method=run.method,
        phase=run.phase,
        attempt=run.attempt,
        base_model=BaseModelPin(id=run.base_entry_id, commit=run.base_commit),
        dataset=DatasetPin(reference=run.dataset_reference, digest=run.dataset_digest, rows=run.dataset_rows),
        validation=(answers.ValidationPin(reference=run.validation_reference, digest=run.validation_digest)
                    if run.validation_reference else None),
        model_name=run.model_name,
        execution=answers.RunExecution(
            device_profile=run.device_profile, devices=run.device_count,
            devices_held=attempt.devices if attempt is not None and attempt.state == "active" else [],
            max_attempts=execution.max_attempts, sharding=execution.sharding),
        config_hash=run.config_hash,
        progress=run.progress or {},
        count=count_of("run", run.phase, run.progress),
        saved_step=(run.progress or {}).get("savedStep"),
        checks=run.checks,
        length_check=_length_check(run),
        results={**(run.results or {}), "model": run.model_reference},
        cost=cost,
        timing=answers.RunTiming(phase_millis=millis, created_at=iso(run.created_at),
                                 finished_at=iso(run.finished_at),
                                 preparing=(run.progress or {}).get("preparing")),
        # what was recorded (stored as the API writes it) is passed as it is stored
        prediction=prediction_json(run, millis.get("TRAINING")),
        memory=memory_json(run),
        failure_reason=run.failure_reason,
        # admission's, then what the run's guards found as it trained (each also in `guards`, typed)
        warnings=[*(run.warnings or []), *(w["message"] for w in (run.guards or {}).get("warnings") or [])],
        guards=guards_json(run),
        description=run.description,
        config_name=run.config_name,
        pause=run.pause,
        resumed=run.resumed,
        parent_run_id=run.parent_run_id,
        branch={k: v for k, v in run.branch.items() if k != "artifacts"} if run.branch else None,
        pipeline=run.pipeline,
        terminal=RunPhase(run.phase) in TERMINAL,
        # nothing changes until a user acts: followers stop here
        settled=RunPhase(run.phase) in TERMINAL or run.phase == RunPhase.PAUSED.value,
    )
    if settings:  # only when asked for, last
        return answer.extended(settings={path: {"value": lookup(run.resolved, path), "source": source}
                                         for path, source in sorted(run.sources.items())})
    return answer


def guards_json(run: Run) -> dict[str, Any] | None:
    """A reinforcement run's guards (`training.server.guards`) as recorded; null for other runs."""
    if run.method not in rewarded():
        return None
    recorded = run.guards or {}
    return {"window": recorded.get("window"), "anchor": recorded.get("anchor"),
            "warnings": recorded.get("warnings") or [], "stop": recorded.get("stop")}


def memory_json(run: Run) -> dict[str, Any] | None:
    """The peak predicted at admission against the one the worker measured (training only: the start checks' peak,
    which holds a second copy of the model, is shown apart)."""
    if run.memory is None:
        return None
    cost = run.cost or {}
    measured = cost.get("peakDeviceMemoryGiB")
    predicted = (run.memory.get("predicted") or {}).get("peakGiB")
    return {**run.memory, "measuredGiB": measured, "reservedGiB": cost.get("peakDeviceReservedGiB"),
            "startCheckGiB": cost.get("startCheckPeakGiB"),
            "ratio": round(measured / predicted, 3) if measured is not None and predicted else None}


def metric_view(metric: RunMetric) -> answers.MetricPoint:
    """A logged step: its values are keys of their own (the one answer that takes undeclared keys)."""
    # a value named like one of the point's own keys never breaks it: the point's keys come first, as they did
    return answers.MetricPoint(**{"step": metric.step, "kind": metric.kind, "attempt": metric.attempt,
                                  **metric.values, "at": iso(metric.at)})


def snapshot_view(snapshot: Snapshot) -> answers.Snapshot:
    """`kinds` are the artifact kinds it still holds; `swept` those retention took off the catalog."""
    swept = snapshot.swept or []
    held_by = ([f"pin ({', '.join(snapshot.pinned)})"] if snapshot.pinned else []) + (
        ["final save"] if snapshot.final else []) + [f"model {ref}" for ref in snapshot.registered or []]
    return answers.Snapshot(
        snapshot_id=snapshot.id, run_id=snapshot.run_id, attempt=snapshot.attempt, step=snapshot.step,
        epoch=snapshot.epoch, final=snapshot.final, artifacts=snapshot.artifacts,
        kinds=[a["kind"] for a in snapshot.artifacts if a["kind"] not in swept], swept=swept,
        pinned=snapshot.pinned or [], registered=snapshot.registered or [], held_by=held_by,
        committed_at=iso(snapshot.committed_at))
