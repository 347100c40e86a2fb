"""Evaluations as users and workers see them: start (every reference resolved and frozen), read, list, cancel,
the predictions; the worker's spec, heartbeats, answers and result.

A model is a base model of the catalog (selected on this deployment) or a registered model version: a BASE
version, or an ADAPTER over its base. An evaluation waits in QUEUED for a device of its profile (the scheduler
grants it: `optimize.jobs.scheduler`), runs in RUNNING and ends COMPLETED, FAILED or CANCELLED. Every answer records the
chat template and base model commit it came from; answers from another commit are answered again.
"""

from __future__ import annotations

import statistics
from typing import Any

from sqlalchemy import delete, func, select

from optimize.catalog.catalog import check_replica_profile
from optimize.catalog.selection import job_model, selection_for
from optimize.chat.families import reads_images
from optimize.chat.grammars import refuse_uncompilable
from optimize.core.access import visible_projects
from optimize.core.clock import iso, utcnow
from optimize.core.errors import Conflict, Invalid, NotFound, Refused
from optimize.core.ids import new_id
from optimize.deployment import Deployment
from optimize.evaluation.graders import report
from optimize.evaluation.phases import EVALUATION, OPEN, TERMINAL, EvaluationPhase
from optimize.jobs.effects import queue_wake
from optimize.jobs.leases import extend, fence, reported
from optimize.jobs.lifecycle import decided, moved, phases_asked, transition
from optimize.jobs.waiting import waiting_for
from optimize.projects.quotas import check_new_work, check_queue_room
from optimize.projects.service import project_for_model, project_work
from optimize.registry.datasets import examples_objects, version_images
from optimize.schemas import evaluations as answers
from optimize.schemas.evaluations import EvaluationRequest
from optimize.schemas.jobs import EvaluationSpec
from optimize.schemas.outcomes import LastWord
from optimize.schemas.progress import count_of
from optimize.scoring.graders import Grade, parse_bundle_grader
from optimize.scoring.groups import zero_variance_share
from optimize.store.db import find_by_id_prefix, insert_ignoring_conflict
from optimize.store.events import record
from optimize.store.tables import Evaluation, EvaluationPrediction
from optimize.workloads.datasets import pick_chat_dataset, refuse_images
from optimize.workloads.graders import Grader, check_grader
from optimize.workloads.graders import prepare_grader as shared_prepare_grader
from optimize.workloads.models import resolve_model, trained_instructions


def prepare_grader(deployment: Deployment, request: EvaluationRequest) -> Grader:
    """The request's grader checked (`workloads.graders`, shared with a distillation's acceptance grader): a
    `bundle:` grader resolved to its exact version and its module imported in the sandbox."""
    grader = check_grader(request.grader)
    if grader.startswith("bundle:") and request.grader_instructions is not None:
        raise Invalid("graderInstructions are for a judge model's grader (model:REF)",
                      hint="leave them out, or pass --grader model:NS/NAME")
    return shared_prepare_grader(deployment, grader, request.project)


def start(deployment: Deployment, request: EvaluationRequest) -> answers.Evaluation:
    grader = prepare_grader(deployment, request)
    with deployment.store.transaction() as session:
        return evaluation_view(insert(deployment, session, request, grader))


def insert(deployment: Deployment, session, request: EvaluationRequest, prepared: Grader) -> Evaluation:
    """Store a new evaluation in the caller's transaction (with what waits for it, as a comparison does), its
    model, judge and dataset resolved and frozen now; the project's quota is checked."""
    grader, bundle = prepared.text, prepared.bundle
    profile = request.device_profile or "cpu"
    if profile not in {p.name for p in deployment.profiles}:
        raise Refused(f"deviceProfile {profile!r} is not a device profile of this deployment",
                      hint="profiles here: " + ", ".join(p.name for p in deployment.profiles))
    reference, model, owner = resolve_model(deployment, session, request.model)
    device = next(p for p in deployment.profiles if p.name == profile)
    check_replica_profile(deployment.catalog.find(model["baseEntryId"]), device, deployment.profiles, "evaluation")
    if grader.startswith("model:"):  # the judge is resolved and frozen now, like the model evaluated
        judge_reference, judge, _ = resolve_model(deployment, session, grader.removeprefix("model:"))
        check_replica_profile(deployment.catalog.find(judge["baseEntryId"]), device, deployment.profiles,
                              "evaluation")
        instructions = request.grader_instructions
        if instructions is None and judge["kind"] == "adapter":
            instructions = trained_instructions(deployment, session, judge_reference)
        model["judge"] = {"reference": judge_reference, "instructions": instructions, **judge}
    elif request.grader_instructions is not None:
        raise Invalid("graderInstructions are for a judge model's grader (model:REF)",
                      hint="leave them out, or pass --grader model:NS/NAME")
    if bundle is not None:
        model["graderBundle"] = bundle
    model["maxNewTokens"] = request.max_new_tokens
    if request.response_schema is not None:
        refuse_uncompilable(request.response_schema, "responseSchema")
        model["responseSchema"] = request.response_schema
    sampling, rows = _sampling(request)
    if sampling:
        model["sampling"] = sampling
    project = project_for_model(session, reference, owner, request.project, "evaluation")
    dataset = pick_chat_dataset(session, request.dataset, project.name, "dataset")
    evaluated = deployment.catalog.find(model["baseEntryId"])
    if not reads_images(evaluated.family):
        refuse_images(dataset, "dataset", f"and base model {evaluated.id} reads no images")
    check_new_work(session, project.name, "evaluation", deployment.quotas)
    evaluation = Evaluation(
        id=new_id(), project=project.name, model_reference=reference, model=model,
        dataset_reference=dataset.reference, dataset_digest=dataset.digest, dataset_rows=dataset.rows,
        grader=grader, device_profile=profile, phase="QUEUED", attempt=0,
        progress={"answered": 0, "total": min(rows or dataset.rows, dataset.rows)}, created_at=utcnow())
    if rows:
        model["rows"] = rows
    session.add(evaluation)
    session.flush()
    record(session, EVALUATION.subject(evaluation.id), "phase", phase="QUEUED")
    queue_wake(session)
    return evaluation


def reusable(session, project: str, model_reference: str, dataset_digest: str, grader: str, max_new_tokens: int
             ) -> Evaluation | None:
    """The project's evaluation of exactly this model version on this dataset version with this grader and answer
    budget, greedy over every row, that completed (the newest), else one still open: what a comparison reuses
    rather than answering the same rows again."""
    found = session.scalars(select(Evaluation).where(
        Evaluation.project == project, Evaluation.model_reference == model_reference,
        Evaluation.dataset_digest == dataset_digest, Evaluation.grader == grader,
        Evaluation.phase.in_([EvaluationPhase.COMPLETED.value, *(p.value for p in OPEN)]))
        .order_by(Evaluation.created_at.desc())).all()
    fitting = [e for e in found if not (e.model.get("sampling") or e.model.get("rows"))
               and e.model.get("maxNewTokens", 256) == max_new_tokens]
    return next((e for e in fitting if e.phase == EvaluationPhase.COMPLETED), None) or next(iter(fitting), None)


def row_scores(session, evaluation_id: str) -> dict[int, float | None]:
    """An evaluation's score for each line it answered (None where its grader could not score the answer)."""
    return dict(session.execute(select(EvaluationPrediction.line, EvaluationPrediction.score).where(
        EvaluationPrediction.evaluation_id == evaluation_id)).all())


MOST_MODEL_FILTER = 1_000  # characters of a model reference an evaluation list is filtered by
DEFAULT_SAMPLING_TEMPERATURE = 0.7  # a reinforcement run's default rollout temperature


def _sampling(request: EvaluationRequest) -> tuple[dict[str, Any] | None, int | None]:
    """The sampling asked for (`generations` answers per prompt at `temperature`, seeded) and the first `rows` asked.
    One generation is a greedy answer unless a temperature is stated."""
    generations, temperature = request.generations, request.temperature
    if generations > 1 and temperature == 0:
        raise Invalid(f"{generations} generations at temperature 0 would be {generations} copies of the greedy "
                      "answer", hint=f"sample at a temperature above 0 (default {DEFAULT_SAMPLING_TEMPERATURE})")
    if generations == 1 and not temperature:
        return None, request.rows
    return {"generations": generations, "temperature": float(temperature or DEFAULT_SAMPLING_TEMPERATURE),
            "seed": request.seed}, request.rows


def evaluation_view(item: Evaluation) -> answers.Evaluation:
    return answers.Evaluation(
        evaluation_id=item.id, project=item.project, model=item.model_reference,
        base_model={"id": item.model["baseEntryId"], "commit": item.model["baseCommit"]},
        dataset={"reference": item.dataset_reference, "digest": item.dataset_digest, "rows": item.dataset_rows},
        grader=item.grader, grader_instructions=(item.model.get("judge") or {}).get("instructions"),
        sampling=item.model.get("sampling"), rows=item.model.get("rows"),
        device_profile=item.device_profile, phase=item.phase,
        attempt=item.attempt, devices_held=item.devices or [] if item.phase == EvaluationPhase.RUNNING else [],
        progress=item.progress, count=count_of("evaluation", item.phase, item.progress),
        report=item.report, failure_reason=item.failure_reason,
        created_at=iso(item.created_at), finished_at=iso(item.finished_at),
        terminal=item.phase in TERMINAL, settled=item.phase in TERMINAL)


def find_evaluation(session, evaluation_id: str) -> Evaluation:
    return find_by_id_prefix(session, Evaluation, evaluation_id, "evaluation",
                             "list evaluations with: akka training evaluations list",
                             visible_projects(Evaluation.project))


def get(deployment: Deployment, evaluation_id: str) -> answers.Evaluation:
    with deployment.store.transaction() as session:
        item = find_evaluation(session, evaluation_id)
        return evaluation_view(item).extended(waiting_for=waiting_for(session, deployment, "evaluation", item))


def list_evaluations(deployment: Deployment, project: str | None, model: str | None, phase: str | None,
                     include_archived: bool = False) -> list[answers.EvaluationListItem]:
    """Newest first; an archived project's evaluations only with `include_archived` or when it is named."""
    query = project_work(Evaluation, project, include_archived)
    if model:
        if len(model) > MOST_MODEL_FILTER:
            return []  # longer than any reference (and, on SQLite, than a LIKE pattern may be)
        query = query.where(Evaluation.model_reference.startswith(model, autoescape=True))  # `_` is a name's
    if phase:
        query = query.where(Evaluation.phase.in_(phases_asked(EVALUATION, phase, {"open": OPEN})))
    with deployment.store.transaction() as session:
        return [evaluation_view(item).extended(answers.EvaluationListItem, project_archived=archived)
                for item, archived in session.execute(query.limit(500))]


def cancel(deployment: Deployment, evaluation_id: str) -> answers.Evaluation:
    def decide(session) -> answers.Evaluation:
        item = find_evaluation(session, evaluation_id)
        if item.phase in TERMINAL:
            if item.phase == EvaluationPhase.CANCELLED:
                return evaluation_view(item)
            raise Refused(f"evaluation {item.id[:12]} is {item.phase}; there is nothing to cancel", phase=item.phase)
        # its worker, if any, is stopped once this commits
        moved(transition(session, EVALUATION, item, EvaluationPhase.CANCELLED), f"evaluation {item.id[:12]}")
        return evaluation_view(item)

    return decided(deployment.store, decide)


def retry(deployment: Deployment, evaluation_id: str) -> answers.Evaluation:
    """Queue an ended evaluation again. A base model resolves to the commit selected now; the answers from that
    commit are kept and the other rows are answered again."""

    def decide(session) -> answers.Evaluation:
        item = find_evaluation(session, evaluation_id)
        if item.phase not in TERMINAL:
            raise Conflict(f"evaluation {item.id[:12]} is {item.phase}; retry it once it has ended",
                           hint=f"follow it with: akka training evaluations wait {item.id[:12]}")
        # the selection is looked up first, on a connection of its own: none is waited for under the project's lock
        selection = selection_for(deployment.store, item.model["baseEntryId"]) if item.model["kind"] == "base" else None
        check_queue_room(session, item.project, deployment.quotas)
        if item.model["kind"] == "base":
            if selection is None:
                raise NotFound(f"base model {item.model['baseEntryId']} is no longer selected on this deployment",
                               hint=f"select it: akka training base-models select {item.model['baseEntryId']}")
            item.model = {**item.model, "baseCommit": selection.commit}
        kept = session.scalar(select(func.count()).select_from(EvaluationPrediction).where(
            EvaluationPrediction.evaluation_id == item.id,
            EvaluationPrediction.base_model_revision == item.model["baseCommit"]))
        moved(transition(session, EVALUATION, item, EvaluationPhase.QUEUED, note="retried", model=item.model,
                         report=None, failure_reason=None, finished_at=None,
                         progress={**item.progress, "answered": kept}), f"evaluation {item.id[:12]}")
        return evaluation_view(item)

    return decided(deployment.store, decide)


def predictions(deployment: Deployment, evaluation_id: str, limit: int | None = None) -> answers.Predictions:
    """The answers by line; the first `limit` (bounded by the route's `limit` rule) or all."""
    with deployment.store.transaction() as session:
        item = find_evaluation(session, evaluation_id)
        query = select(EvaluationPrediction).where(EvaluationPrediction.evaluation_id == item.id) \
            .order_by(EvaluationPrediction.line)
        rows = session.scalars(query.limit(limit) if limit else query).all()
        return answers.Predictions(evaluation_id=item.id, predictions=[prediction_view(p) for p in rows])


def prediction_view(p: EvaluationPrediction) -> answers.Prediction:
    return answers.Prediction(
        line=p.line, prompt=p.prompt, expected=p.expected, answer=p.answer, score=p.score,
        explanation=p.explanation, fields=p.fields, samples=p.samples, chat_template_sha256=p.chat_template_sha256,
        base_model_revision=p.base_model_revision)


# --- the worker's calls ------------------------------------------------------------------------------------


def job_spec(deployment: Deployment, evaluation_id: str, token: str) -> dict[str, Any]:
    with deployment.store.transaction() as session:
        item, _lease = fence(session, EVALUATION, evaluation_id, token)
        kept = session.scalars(select(EvaluationPrediction.line).where(
            EvaluationPrediction.evaluation_id == item.id,
            EvaluationPrediction.base_model_revision == item.model["baseCommit"])).all()
        return EvaluationSpec.model_validate({
                "evaluationId": item.id, "grader": _worker_grader(item), "leaseSeconds": deployment.lease_seconds,
                "dataset": {"reference": item.dataset_reference, "digest": item.dataset_digest,
                            "objects": examples_objects(session, item.dataset_digest),
                            "images": version_images(session, item.dataset_digest)},
                "model": job_model(deployment.store, deployment.catalog.find(item.model["baseEntryId"]),
                                   item.model["baseCommit"]),
                "adapterManifest": _manifest(item.model),
                "judge": _judge_spec(deployment, item.model.get("judge")),
                "maxNewTokens": item.model.get("maxNewTokens"),
                "answeredLines": sorted(kept), "sampling": item.model.get("sampling"),
                "rows": item.model.get("rows"), "responseSchema": item.model.get("responseSchema")}).wire()


def _worker_grader(item: Evaluation) -> str:
    """The grader as the worker reads it: a `bundle:` grader pinned to its archive's digest (what it downloads)."""
    bundle = item.model.get("graderBundle")
    if not bundle:
        return item.grader
    return parse_bundle_grader(item.grader).resolved(bundle["reference"], bundle["sha256"]).pinned


def _manifest(model: dict[str, Any]) -> str | None:
    return (model.get("manifestDigest") or "").removeprefix("sha256:") or None


def _judge_spec(deployment: Deployment, judge: dict[str, Any] | None) -> dict[str, Any] | None:
    if not judge:
        return None
    return {"reference": judge["reference"], "adapterManifest": _manifest(judge),
            "instructions": judge.get("instructions"),
            "model": job_model(deployment.store, deployment.catalog.find(judge["baseEntryId"]), judge["baseCommit"])}


def add_predictions(deployment: Deployment, evaluation_id: str, token: str, items: list[dict[str, Any]]
                    ) -> dict[str, Any]:
    """Answers as they are graded (visible while the evaluation runs); an answer from another base model commit
    is replaced."""
    with deployment.store.transaction() as session:
        item, lease = fence(session, EVALUATION, evaluation_id, token)
        extend(lease, deployment.lease_seconds)
        for p in items:
            session.execute(delete(EvaluationPrediction).where(EvaluationPrediction.evaluation_id == item.id,
                                                               EvaluationPrediction.line == p["line"]))
            insert_ignoring_conflict(session, EvaluationPrediction, {
                "evaluation_id": item.id, "line": p["line"], "prompt": p["prompt"], "expected": p["expected"],
                "answer": p["answer"], "score": p.get("score"), "explanation": p.get("explanation"),
                "fields": p.get("fields"), "samples": p.get("samples"),
                "chat_template_sha256": p["chatTemplateSha256"],
                "base_model_revision": p["baseModelRevision"], "at": utcnow()}, ["evaluation_id", "line"])
        answered = session.scalar(select(func.count()).select_from(EvaluationPrediction).where(
            EvaluationPrediction.evaluation_id == item.id))
        item.progress = {**item.progress, "answered": answered}
        record(session, EVALUATION.subject(item.id), "progress", answered=answered)
        return {"accepted": len(items)}


def finish(deployment: Deployment, evaluation_id: str, token: str, body: Any) -> dict[str, Any]:
    """The worker's last word (read once its lease is known to hold): COMPLETED, or FAILED with its reason."""
    with deployment.store.transaction() as session:
        item, _lease = fence(session, EVALUATION, evaluation_id, token)
        word = LastWord.read(body)
        if word.failed:
            reported(transition(session, EVALUATION, item, EvaluationPhase.FAILED, lease=token, by_worker=True,
                                failure_reason=word.failure_reason()), EVALUATION, evaluation_id)
        else:  # the report covers every answer held, those kept from an earlier attempt included
            held = session.scalars(select(EvaluationPrediction).where(
                EvaluationPrediction.evaluation_id == item.id)).all()
            reported(transition(session, EVALUATION, item, EvaluationPhase.COMPLETED, lease=token, by_worker=True,
                                failure_reason=None, report=_report(held)), EVALUATION, evaluation_id)
        return {"phase": item.phase}


def _report(held: list[EvaluationPrediction]) -> dict[str, Any]:
    """The grader's report over every answer held; a sampling evaluation's covers every sampled answer, and says
    how its groups' scores spread (`sampling.zeroVarianceShare`: the rows whose scored answers all score the same,
    which a reinforcement run's update learns nothing from)."""
    if not any(p.samples for p in held):
        return {**report([Grade(p.score, p.explanation or "", p.fields or {}) for p in held]), "sampling": None}
    groups = [[Grade(s.get("score"), s.get("explanation") or "", s.get("fields") or {}) for s in p.samples or []]
              for p in held]
    flat = [g for group in groups for g in group]
    values = [g.score for g in flat if g.score is not None]
    share, counted = zero_variance_share([g.score for g in group] for group in groups)
    return {**report(flat), "sampling": {
        "answers": len(flat), "std": statistics.pstdev(values) if len(values) > 1 else None,
        "groups": counted, "zeroVarianceShare": share}}


def requeue(session, item: Evaluation, reason: str) -> bool:
    """Queued again after its worker was lost or the server restarted: the answers it holds from its base model
    commit are kept, and only the other rows are asked."""
    return transition(session, EVALUATION, item, EvaluationPhase.QUEUED, note=reason)
