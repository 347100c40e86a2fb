"""Dataset analyses: start (or reach the one kept), read, list; and what a worker reports.

One analysis is kept for each (examples, base model commit, Optimize version). The examples are named by their
content digest (their bytes in order, whatever shards hold them), so two names or versions holding the same
examples share one analysis, also when they were cut at another `--shard-size`. Starting an analysis launches a
worker process on this host; it claims no device.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from optimize import __version__
from optimize.analysis.histogram import histogram
from optimize.analysis.states import ANALYSIS, TERMINAL, AnalysisPhase
from optimize.catalog.selection import job_model, selection_for
from optimize.chat.families import reads_images
from optimize.chat.formats import DatasetFormat
from optimize.core.access import only_visible, visible_item
from optimize.core.clock import iso, utcnow
from optimize.core.errors import Conflict, Invalid, NotFound, Refused
from optimize.core.ids import new_id
from optimize.core.refs import parse_reference
from optimize.deployment import Deployment
from optimize.jobs.effects import queue_wake
from optimize.jobs.leases import extend, fence, reported
from optimize.jobs.lifecycle import transition
from optimize.registry.datasets import content_digest, examples_objects, resolve_reference, version_images
from optimize.schemas import analyses as answers
from optimize.schemas.jobs import AnalysisSpec
from optimize.schemas.outcomes import AnalysisLastWord
from optimize.schemas.plans import parse_plan
from optimize.schemas.progress import count_of
from optimize.store.db import id_prefix_matches_nothing, insert_ignoring_conflict, shown_id
from optimize.store.events import record
from optimize.store.tables import Analysis
from optimize.workloads.estimates import estimate
from optimize.workloads.lengths import lengths_file
from optimize.workloads.throughput import estimate_scaled

ID_PREFIX_MIN = 4


def analysis_view(item: Analysis) -> answers.Analysis:
    lengths = {"row_lengths": f"sha256:{item.lengths_sha256}"} if item.lengths_sha256 else {}
    return answers.Analysis(
        analysis_id=item.id, phase=item.phase, attempt=item.attempt, dataset=item.dataset_reference,
        examples_digest=item.examples_digest, kind=item.kind, base_model=item.base_entry_id,
        base_model_commit=item.base_commit, optimize_version=item.optimize_version, reason=item.reason,
        refused=item.refused, created_at=iso(item.created_at), started_at=iso(item.started_at),
        finished_at=iso(item.finished_at), report=item.report, progress=item.progress or {},
        count=count_of("analysis", item.phase, item.progress),
        terminal=AnalysisPhase(item.phase) in TERMINAL, settled=AnalysisPhase(item.phase) in TERMINAL, **lengths)


def start_analysis(deployment: Deployment, dataset: str, model: str | None,
                   plan_document: dict[str, Any] | None = None,
                   waited_by: Callable[[Session, str], None] | None = None) -> tuple[answers.Analysis, bool]:
    """Start an analysis or return the one kept; returns (analysis, whether it was (re)started: the scheduler
    starts its worker). `waited_by(session, analysis id)` runs in the same transaction: a run recording its edge to
    the analysis (`jobs.graph`), so the analysis is never kept without the edge of the run that started it.

    With a run plan, the base model is the plan's `baseModel` unless `model` is given, a `model` naming another
    one is refused, and a finished analysis comes back with the estimates of the plan's steps and time."""
    reference = parse_reference(dataset)
    plan = parse_plan(plan_document) if plan_document is not None else None
    entry = _base_model(deployment, model, plan)
    chosen = selection_for(deployment.store, entry.id)
    if chosen is None:
        raise Refused(f"base model {entry.id} is not selected on this deployment, so its tokenizer is not here",
                      hint=f"select it first: akka training base-models select {entry.id}")
    with deployment.store.transaction() as session:
        found, version = resolve_reference(session, reference)
        if version.images and not reads_images(entry.family):
            raise Refused(f"{found.namespace}/{found.name}:v{version.version} holds rows with images "
                          f"({len(version.images)} image(s)), and base model {entry.id} reads no images",
                          hint="measure it under a model that takes images (the smolvlm family), or register the "
                               "rows without their image parts to measure their text")
        if version.prepared is not None:
            raise Refused(f"{found.namespace}/{found.name}:v{version.version} holds prepared token rows, which need "
                          f"no analysis: the version recorded their longest row ({version.prepared.get('longestRow')} "
                          "tokens) when it was registered",
                          hint="a run's dry run shows it: akka training runs start -f PLAN --dry-run")
        examples = content_digest(session, deployment.blobs, version.digest)
        values = {
            "id": new_id(), "examples_digest": examples, "kind": found.kind, "base_entry_id": entry.id,
            "base_commit": chosen.commit, "optimize_version": __version__,
            "dataset_reference": f"{found.namespace}/{found.name}:v{version.version}",
            "phase": AnalysisPhase.PENDING.value, "attempt": 0, "created_at": utcnow(),
        }
        created = insert_ignoring_conflict(session, Analysis, values,
                                           ["examples_digest", "base_commit", "optimize_version"]) == 1
        item = session.scalar(select(Analysis).where(
            Analysis.examples_digest == examples, Analysis.base_commit == chosen.commit,
            Analysis.optimize_version == __version__))
        if created:
            queue_wake(session)  # the scheduler starts its worker
        restart = not created and item.phase == AnalysisPhase.FAILED and not item.refused
        if restart:
            restart = transition(session, ANALYSIS, item, AnalysisPhase.PENDING, reason=None, started_at=None,
                                 finished_at=None)
        if waited_by is not None:
            waited_by(session, item.id)
        body = analysis_view(item)
        launch = created or restart
        if plan is not None and item.phase == AnalysisPhase.DONE.value:
            lengths = lengths_file(deployment.blobs, item.id, item.lengths_sha256)  # the figures the worker stored
            # the catalog's figure, scaled by how fast runs of the plan's shape trained on this deployment
            body = body.extended(estimates=estimate_scaled(session, estimate(item.report, lengths, plan, entry), plan,
                                                           entry.id))
    return body, bool(launch)


def _base_model(deployment: Deployment, model: str | None, plan):
    if plan is None:
        if not model:
            raise Invalid("name the base model", hint="pass --model BASE_MODEL, or a run file with -f")
        return deployment.catalog.find(model)
    planned = deployment.catalog.find(plan.base_model)
    if model and deployment.catalog.find(model).id != planned.id:
        raise Refused(f"--model {model} names another base model than the run file's baseModel {plan.base_model}",
                      hint="leave --model out to use the run file's baseModel, or change the run file")
    return planned


def get_analysis(deployment: Deployment, analysis_id: str) -> answers.Analysis:
    with deployment.store.transaction() as session:
        return analysis_view(_find(session, analysis_id))


def length_histogram(deployment: Deployment, analysis_id: str, bins: int) -> answers.LengthHistogram:
    """The analysis' row lengths in `bins` equal-width bins, against the common maxSeqLength limits."""
    with deployment.store.transaction() as session:
        item = _find(session, analysis_id)
        phase, sha, found = item.phase, item.lengths_sha256, item.id
    if phase != AnalysisPhase.DONE.value:
        raise Conflict(f"analysis {found[:12]} is {phase}; its row lengths are there once it is done",
                       hint=f"follow it with: akka training datasets analyses get {found[:12]} --wait")
    if not sha:
        raise NotFound(f"analysis {found[:12]} kept no per-row lengths (it ran before they were stored)",
                       hint="analyze the dataset again under a newer Optimize")
    return histogram(found, lengths_file(deployment.blobs, found, sha), bins)


def _find(session, analysis_id: str) -> Analysis:
    if len(analysis_id) < ID_PREFIX_MIN:
        raise NotFound(f"analysis {analysis_id!r} does not exist", hint=f"give at least {ID_PREFIX_MIN} characters")
    if id_prefix_matches_nothing(analysis_id.lower()):
        raise NotFound(f"analysis {shown_id(analysis_id)} does not exist")
    query = select(Analysis).where(Analysis.id.startswith(analysis_id.lower()))
    items = session.scalars(only_visible(query, visible_item(Analysis))).all()
    if len(items) > 1:
        raise Conflict(f"{analysis_id!r} names {len(items)} analyses", hint="give more of the id")
    if not items:
        raise NotFound(f"analysis {analysis_id!r} does not exist")
    return items[0]


def list_analyses(deployment: Deployment, dataset: str) -> list[answers.Analysis]:
    """Analyses kept for the examples a dataset reference resolves to."""
    reference = parse_reference(dataset)
    with deployment.store.transaction() as session:
        _found, version = resolve_reference(session, reference)
        examples = content_digest(session, deployment.blobs, version.digest)
        items = session.scalars(select(Analysis).where(Analysis.examples_digest == examples)
                                .order_by(Analysis.created_at.desc()))
        return [analysis_view(item) for item in items]


# --- what workers call (lease-checked) ---------------------------------------------------------------------


def job_spec(deployment: Deployment, analysis_id: str, token: str) -> dict[str, Any]:
    with deployment.store.transaction() as session:
        item, _lease = fence(session, ANALYSIS, analysis_id, token)
        return AnalysisSpec.model_validate({
            "analysisId": item.id, "kind": item.kind, "format": DatasetFormat.for_kind(item.kind).value,
            "objects": _objects(session, item), "images": version_images(session, _digest(session, item)),
            "leaseSeconds": deployment.lease_seconds,
            "model": job_model(deployment.store, deployment.catalog.find(item.base_entry_id), item.base_commit),
        }).wire()


def _digest(session, item: Analysis) -> str:
    """The digest of the version the analysis was started for (versions never change)."""
    _found, version = resolve_reference(session, parse_reference(item.dataset_reference))
    return version.digest


def _objects(session, item: Analysis) -> list[dict[str, Any]]:
    return examples_objects(session, _digest(session, item))


def report_progress(deployment: Deployment, analysis_id: str, token: str, body: dict[str, Any]) -> dict[str, Any]:
    """Rows measured of rows total, as the worker goes: an event, so followers see it."""
    with deployment.store.transaction() as session:
        item, lease = fence(session, ANALYSIS, analysis_id, token)
        extend(lease, deployment.lease_seconds)
        item.progress = {**(item.progress or {}), **(body.get("progress") or {})}
        record(session, ANALYSIS.subject(item.id), "progress", rowsMeasured=item.progress.get("rowsMeasured"))
        return {"phase": item.phase}


def finish(deployment: Deployment, analysis_id: str, token: str, body: Any) -> dict[str, Any]:
    """The worker's last word (read once its lease is known to hold): DONE with its report, or FAILED."""
    with deployment.store.transaction() as session:
        item, _lease = fence(session, ANALYSIS, analysis_id, token)
        word = AnalysisLastWord.read(body)
        if word.failed:
            reported(transition(session, ANALYSIS, item, AnalysisPhase.FAILED, lease=token, by_worker=True,
                                reason=word.failure_reason(), refused=word.refused),
                     ANALYSIS, analysis_id)
        else:
            reported(transition(session, ANALYSIS, item, AnalysisPhase.DONE, lease=token, by_worker=True,
                                report=word.report, lengths_sha256=word.lengths_sha256),
                     ANALYSIS, analysis_id)
        return {"phase": item.phase}
