"""What a run's worker reports, fenced by its lease: its job, progress, metrics, rollouts, saves and its last word.

Every call names the attempt by its lease token (`optimize.jobs.leases.fence`); a worker whose attempt has ended
(lost, failed, cancelled, requeued) is answered `lease_lost` and stops.

A reinforcement run's guards (`guards`) are judged here as its metrics arrive (`watch`), so every reader of the
run sees the one verdict recorded on it; a stop that `execution.stopWhen` asks for reaches the worker as a pause
does, in its next heartbeat or progress answer (`instructions`).
"""

from __future__ import annotations

import json
import math
from typing import Any

from sqlalchemy import select, update

from optimize.catalog.selection import job_model
from optimize.chat.formats import DatasetFormat
from optimize.core.clock import iso, utcnow
from optimize.core.errors import Invalid, NotFound
from optimize.core.ids import new_id
from optimize.deployment import Deployment
from optimize.jobs.leases import extend, fence
from optimize.jobs.lifecycle import transition
from optimize.registry.datasets import examples_objects, version_format, version_images
from optimize.schemas import runs as answers
from optimize.schemas.jobs import RunSpec
from optimize.schemas.outcomes import Outcome, RunLastWord, RunProgress
from optimize.schemas.plans import REINFORCEMENT, StopWhen
from optimize.schemas.resolved import ResolvedReward, resolved_config, resolved_execution
from optimize.store.db import insert_ignoring_conflict
from optimize.store.events import record
from optimize.store.tables import Run, RunAttempt, RunMetric, RunRollout, Snapshot
from optimize.training.server import guards
from optimize.training.server.attempts import fail_run
from optimize.training.server.completion import complete_run
from optimize.training.server.lifecycle import finish_pause, pause_by_plan, paused_by_plan
from optimize.training.server.phases import RUN, RunPhase
from optimize.training.server.retention import sweep
from optimize.training.server.views import snapshot_view
from optimize.workloads.models import trained_instructions

ARTIFACT_KINDS = ("weights", "trainingState")
ROLLOUT_RECORDS = 64  # updates' rollout samples one call may carry
ROLLOUT_ITEMS = 16  # completions kept of one update
ROLLOUT_TEXT = 2000  # characters kept of a prompt, a completion or an error text (a longer one is cut and marked)
ROLLOUT_TERMS = 32  # term scores kept of one completion


def _leased(session, run_id: str, token: str) -> tuple[Run, RunAttempt]:
    run, lease = fence(session, RUN, run_id, token)
    return run, session.get(RunAttempt, (run_id, lease.attempt))


def job_spec(deployment: Deployment, run_id: str, token: str) -> dict[str, Any]:
    with deployment.store.transaction() as session:
        run, attempt = _leased(session, run_id, token)
        return RunSpec.model_validate({
            "runId": run.id, "attempt": attempt.number, "project": run.project, "method": run.method,
            "config": run.resolved["config"], "execution": _execution(session, run),
            "devices": attempt.devices, "leaseSeconds": deployment.lease_seconds,
            "dataset": _objects(session, run.dataset_digest),
            "validation": _objects(session, run.validation_digest) if run.validation_digest else None,
            "model": job_model(deployment.store, deployment.catalog.find(run.base_entry_id), run.base_commit),
            "resume": _resume_point(session, run),
            "branch": {"restore": run.branch["restore"], "step": run.branch["step"],
                       "artifacts": [_artifact(a) for a in run.branch["artifacts"]]} if run.branch else None,
            "judges": _judges(deployment, session, run),
        }).wire()


def _execution(session, run: Run) -> dict[str, Any]:
    """How the attempt executes: the run's resolved execution, without the plan's pauseAtStep once the run has
    paused there (a resumed attempt does not pause there again)."""
    execution = run.resolved["execution"]
    if execution.get("pauseAtStep") is not None and paused_by_plan(session, run):
        return {**execution, "pauseAtStep": None}
    return execution


def _judges(deployment: Deployment, session, run: Run) -> dict[str, Any]:
    """Each judge reward term's model, by the term's name: its frozen reference, its adapter's weights manifest,
    its instructions (the term's own, else a trained judge's) and its base model, which may differ from the run's."""
    judges = {}
    reward = resolved_config(run.resolved["config"]).reward
    for term in reward.terms if isinstance(reward, ResolvedReward) else []:  # a reinforcement run's terms
        if term.kind != "judge":
            continue
        manifest = (term.judge_manifest_digest or "").removeprefix("sha256:") or None
        instructions = term.instructions
        if instructions is None and manifest:
            try:
                instructions = trained_instructions(deployment, session, term.judge_reference)
            except NotFound:  # the version is gone: the built-in instructions grade
                instructions = None
        judges[term.name] = {
            "reference": term.judge_reference, "adapterManifest": manifest, "instructions": instructions,
            "model": job_model(deployment.store, deployment.catalog.find(term.judge_base_entry_id),
                               term.judge_base_commit)}
    return judges


def _artifact(item: dict[str, Any]) -> dict[str, Any]:
    return {"kind": item["kind"], "manifestSha256": item["manifestDigest"].removeprefix("sha256:")}


def _resume_point(session, run: Run) -> dict[str, Any] | None:
    """The save a resumed attempt restores: its step and the manifests of its weights and training state."""
    snapshot_id = (run.resumed or {}).get("snapshotId")
    snapshot = session.get(Snapshot, snapshot_id) if snapshot_id else None
    if snapshot is None:
        return None
    return {"snapshotId": snapshot.id, "step": snapshot.step,
            "artifacts": [_artifact(a) for a in snapshot.artifacts]}


def _objects(session, digest: str) -> dict[str, Any]:
    objects = examples_objects(session, digest)
    return {"digest": digest, "rows": sum(o["rows"] for o in objects), "objects": objects,
            "prepared": version_format(session, digest) == DatasetFormat.PREPARED,
            "images": version_images(session, digest)}


def instructions(run: Run) -> dict[str, Any]:
    """What the worker reads from every heartbeat and progress answer: the phase, a pause to carry out, and a stop
    its guards asked for (why, in words: the worker saves at its next update and completes there)."""
    pause = run.pause if run.phase == RunPhase.PAUSING.value else None
    stop = (run.guards or {}).get("stop") if run.phase == RunPhase.TRAINING.value else None
    return {"phase": run.phase, "pause": pause["checkpoint"] if pause else None,
            "stop": stop["message"] if stop else None}


def report_progress(deployment: Deployment, run_id: str, token: str, body: dict[str, Any]) -> dict[str, Any]:
    """Rows done of rows total while preparing; the step while training; the start checks once they ran.
    The first report with `training: true` moves the run to TRAINING; one with `planPause: STEP` (the worker
    stopping at its plan's execution.pauseAtStep) moves it to PAUSING, as asked by the plan."""
    with deployment.store.transaction() as session:
        run, lease = fence(session, RUN, run_id, token)
        extend(lease, deployment.lease_seconds)
        report = RunProgress.read(body)
        progress = {**(run.progress or {}), **report.progress}
        values: dict[str, Any] = {"progress": progress}
        if report.checks is not None:
            values["checks"] = report.checks
        found = {key: value for key, value in (("dataFit", report.data_fit), ("smoke", report.smoke))
                 if value is not None}
        if found:  # what the worker found before training: the rows' fit, the smoke check's outcome
            values["results"] = {**(run.results or {}), **found}
        if not (report.training and run.phase == RunPhase.PREPARING.value
                and transition(session, RUN, run, RunPhase.TRAINING, lease=token, by_worker=True, **values)):
            for key, value in values.items():
                setattr(run, key, value)
            record(session, RUN.subject(run.id), "progress", step=progress.get("observedStep"),
                   rowsDone=progress.get("rowsDone"))
        if report.plan_pause is not None:
            pause_by_plan(session, run, report.plan_pause)
        return instructions(run)


def report_metrics(deployment: Deployment, run_id: str, token: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    with deployment.store.transaction() as session:
        run, attempt = _leased(session, run_id, token)
        for item in items:
            if item.get("kind") not in ("train", "validation") or not isinstance(item.get("step"), int):
                raise Invalid("a metric needs kind train or validation and an integer step")
            insert_ignoring_conflict(session, RunMetric, {
                "run_id": run.id, "kind": item["kind"], "step": item["step"], "attempt": attempt.number,
                "values": item.get("values") or {}, "at": utcnow()}, ["run_id", "kind", "step"])
        if run.method in REINFORCEMENT and any(item["kind"] == "train" for item in items):
            watch(session, run)
        return {"accepted": len(items)}


def watch(session, run: Run) -> None:
    """Judge a reinforcement run's latest updates by its guards' rule: record the first window's reward once it is
    in, each kind of warning the first time it is met, and the stop `execution.stopWhen` asks for, each with an
    event (what a follower's stream wakes on). The window is fixed by the run's length the first time."""
    recorded = dict(run.guards or {})
    window = recorded.get("window") or guards.window_for(
        (run.progress or {}).get("totalSteps")
        or resolved_config(run.resolved["config"]).loop.updates(run.dataset_rows, run.device_count))
    anchor = recorded.get("anchor") or guards.anchor_of(_updates(session, run.id, RunMetric.step, 4 * window), window)
    recent = _updates(session, run.id, RunMetric.step.desc(), 2 * window)[::-1]
    bounds = resolved_execution(run.resolved).stop_when or StopWhen()
    found, stop = guards.judge(anchor, recent, window, bounds.reward_drop_below, bounds.kl_above)
    now = iso(utcnow())
    warnings = list(recorded.get("warnings") or [])
    for finding in found:
        if all(w["kind"] != finding["kind"] for w in warnings):  # each kind once: when it was first met
            warnings.append({**finding, "at": now})
            _record(session, run, "guard-warning", finding)
    if stop is not None and recorded.get("stop") is None and run.phase == RunPhase.TRAINING.value:
        recorded["stop"] = {**stop, "at": now}
        _record(session, run, "guard-stop", stop)
    updated = {**recorded, "window": window, "anchor": anchor, "warnings": warnings}
    updated.setdefault("stop", None)
    if updated != run.guards:
        run.guards = updated


def _record(session, run: Run, event: str, finding: dict[str, Any]) -> None:
    record(session, RUN.subject(run.id), event, guard=finding["kind"],
           **{key: value for key, value in finding.items() if key != "kind"})


def _updates(session, run_id: str, order: Any, limit: int) -> list[guards.Update]:
    rows = session.execute(select(RunMetric.step, RunMetric.values).where(
        RunMetric.run_id == run_id, RunMetric.kind == "train").order_by(order).limit(limit)).all()
    return [guards.Update.of(step, values or {}) for step, values in rows]


def report_rollouts(deployment: Deployment, run_id: str, token: str, records: Any) -> dict[str, Any]:
    """A reinforcement run's sample of rollouts, one record per update: `{step, items: [{prompt, completion,
    scores: {term: value}, total, errors?, group?}]}`. Each update keeps one record: the first one sent, replaced
    only by a later attempt's (which trained the update again after a resume). What is stored is bounded here,
    whatever the worker sent: `ROLLOUT_ITEMS` completions, `ROLLOUT_TEXT` characters of a text, cut and marked."""
    with deployment.store.transaction() as session:
        run, attempt = _leased(session, run_id, token)  # a stale worker is told so before anything else
        if not isinstance(records, list) or len(records) > ROLLOUT_RECORDS:
            raise Invalid(f"rollouts need records: a list of at most {ROLLOUT_RECORDS} updates' samples")
        clean = []
        for sent in records:
            if not isinstance(sent, dict) or type(sent.get("step")) is not int or not 0 <= sent["step"] < 2**31 \
                    or not isinstance(sent.get("items"), list):
                raise Invalid("a rollout record needs its step (a non-negative integer) and its items (a list)")
            clean.append((sent["step"], [_rollout_item(item) for item in sent["items"][:ROLLOUT_ITEMS]]))
        for step, items in clean:
            values = {"run_id": run.id, "step": step, "attempt": attempt.number, "items": items, "at": utcnow()}
            if not insert_ignoring_conflict(session, RunRollout, values, ["run_id", "step"]):
                session.execute(update(RunRollout).where(
                    RunRollout.run_id == run.id, RunRollout.step == step, RunRollout.attempt < attempt.number
                ).values(attempt=attempt.number, items=items, at=values["at"]))
        return {"accepted": len(clean)}


def _rollout_item(item: Any) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise Invalid("a rollout item is an object: prompt, completion, scores, total")
    marked = item.get("cut") if isinstance(item.get("cut"), list) else []
    cut = [name for name in ("prompt", "completion") if name in marked]
    texts = {}
    for name in ("prompt", "completion"):
        text, was_cut = _bounded(item.get(name))
        texts[name] = text
        if was_cut and name not in cut:
            cut.append(name)
    scores = item.get("scores") if isinstance(item.get("scores"), dict) else {}
    errors = item.get("errors") if isinstance(item.get("errors"), dict) else {}
    clean: dict[str, Any] = {
        **texts,
        "scores": {_bounded(name, 64)[0]: _number(value) for name, value in list(scores.items())[:ROLLOUT_TERMS]},
        "total": _number(item.get("total")),
    }
    if type(item.get("group")) is int:
        clean["group"] = item["group"]
    errors = {_bounded(name, 64)[0]: _bounded(text)[0] for name, text in list(errors.items())[:ROLLOUT_TERMS] if text}
    if errors:
        clean["errors"] = errors
    if cut:
        clean["cut"] = cut
    return clean


def _bounded(text: Any, limit: int = ROLLOUT_TEXT) -> tuple[str, bool]:
    text = text if isinstance(text, str) else "" if text is None else str(text)
    if len(text) <= limit:
        return text, False
    return text[:limit - 1] + "…", True


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return float(value) if math.isfinite(value) else None
    except OverflowError:  # an integer beyond a float
        return None


def commit_snapshot(deployment: Deployment, run_id: str, token: str, body: dict[str, Any]) -> answers.Snapshot:
    """A save becomes a snapshot only once every file its manifests name is held under its digest; the
    manifests were uploaded last, so a half-uploaded save is never listed."""
    with deployment.store.transaction() as session:
        _leased(session, run_id, token)  # a stale worker is told so before anything else
    step = body.get("step")
    if type(step) is not int or step < 0:
        raise Invalid("a snapshot needs its step, a non-negative integer")
    artifacts = []
    for item in body.get("artifacts") or []:
        if item.get("kind") not in ARTIFACT_KINDS:
            raise Invalid(f"artifact kind {item.get('kind')!r} is not one of {', '.join(ARTIFACT_KINDS)}")
        manifest = _verified_manifest(deployment, item.get("manifestSha256", ""))
        artifacts.append({"kind": item["kind"], "manifestDigest": f"sha256:{item['manifestSha256']}",
                          "bytes": sum(f["bytes"] for f in manifest["files"]),
                          "files": [f["path"] for f in manifest["files"]]})
    if not artifacts:
        raise Invalid("a snapshot needs at least one artifact")
    with deployment.store.transaction() as session:
        run, attempt = _leased(session, run_id, token)
        insert_ignoring_conflict(session, Snapshot, {
            "id": new_id(), "run_id": run.id, "attempt": attempt.number, "step": step, "epoch": body.get("epoch"),
            "final": bool(body.get("final")), "artifacts": artifacts, "committed_at": utcnow()},
            ["run_id", "attempt", "step"])
        snapshot = session.scalar(select(Snapshot).where(Snapshot.run_id == run.id, Snapshot.attempt == attempt.number,
                                                         Snapshot.step == step))
        run.progress = {**(run.progress or {}), "savedStep": step}
        record(session, RUN.subject(run.id), "snapshot", step=step, snapshotId=snapshot.id)
        sweep(session, run)
        return snapshot_view(snapshot)


def _verified_manifest(deployment: Deployment, sha256: str) -> dict[str, Any]:
    if not deployment.blobs.holds(sha256):  # a corrupt copy is quarantined: not held
        raise Invalid(f"manifest sha256:{sha256} is not held; upload it before committing the snapshot")
    try:
        # held_path: a store in a bucket reads it through its local cache
        manifest = json.loads(deployment.blobs.held_path(sha256).read_bytes())
        files = manifest["files"]
        if not all(isinstance(f["path"], str) and isinstance(f["bytes"], int) for f in files):
            raise TypeError
        missing = [f["path"] for f in files if not deployment.blobs.holds(f["sha256"])]
    except (ValueError, KeyError, TypeError):
        raise Invalid(f"blob sha256:{sha256} is not a snapshot manifest (JSON with files of path, sha256 and bytes)"
                      ) from None
    if missing:
        raise Invalid(f"the snapshot's files {', '.join(missing)} are not held; upload them first")
    return manifest


def finish(deployment: Deployment, run_id: str, token: str, body: Any) -> dict[str, Any]:
    """The worker's last word (read once its lease is known to hold): failed with a reason, stopped for a pause, or
    completed with its final snapshot, which is registered as the project's model."""
    with deployment.store.transaction() as session:
        run, attempt = _leased(session, run_id, token)
        word = RunLastWord.read(body)
        if word.outcome is Outcome.FAILED:
            fail_run(session, run, word.failure_reason(), by_worker=True)
            return {"phase": run.phase}
        if word.outcome is Outcome.PAUSED:
            # a stop at the plan's execution.pauseAtStep whose report did not arrive is recorded now
            if run.phase != RunPhase.PAUSING.value and not pause_by_plan(session, run, word.paused.step):
                raise Invalid(f"run {run.id[:12]} is {run.phase}, not pausing; its worker cannot report a pause")
            finish_pause(session, run, attempt, word.paused, by_worker=True)
            return {"phase": run.phase}
        complete_run(deployment, session, run, attempt, word)
        return {"phase": run.phase, "model": run.model_reference}
