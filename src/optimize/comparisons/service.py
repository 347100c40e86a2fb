"""Comparisons as users see them: create (every model resolved to a version and every evaluation started or reused
in one transaction, with the edges the comparison waits on), read, list, cancel, one row's answers side by side;
and the server's step that scores a comparison once its evaluations have ended.

A comparison scores its source snapshot's model (registered from the snapshot's weights, as `snapshots register`
does) and each candidate — a named model, a completed branch, or every completed branch of a parent from the
source snapshot (its fan) — on one evaluation dataset version, with one grader and one completion-token budget.
An evaluation of the same model version, dataset version, grader and budget that completed (or is still running)
is reused rather than answered again. Each evaluation is an edge of the job graph that lets the comparison go on
when it fails (`proceed`): the result is then Partial, and a Partial result names no winner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from optimize.comparisons import intervals
from optimize.comparisons.phases import COMPARISON, OPEN, TERMINAL
from optimize.core.access import current_token, visible_projects
from optimize.core.clock import iso, utcnow
from optimize.core.errors import Invalid, NotFound, Refused
from optimize.core.ids import new_id
from optimize.core.names import check_alias
from optimize.deployment import Deployment
from optimize.evaluation import service as evaluations
from optimize.evaluation.phases import EVALUATION
from optimize.evaluation.phases import TERMINAL as EVALUATION_ENDED
from optimize.jobs import graph
from optimize.jobs.effects import queue_wake
from optimize.jobs.leases import device_seconds
from optimize.jobs.lifecycle import decided, moved, phases_asked, transition
from optimize.projects.service import open_project
from optimize.registry.aliases import move_alias
from optimize.registry.models import resolve_model_reference
from optimize.registry.nouns import MODELS
from optimize.schemas import comparisons as answers
from optimize.schemas.comparisons import MOST_CANDIDATES, ComparisonRequest
from optimize.schemas.evaluations import EvaluationRequest
from optimize.schemas.phases import ComparisonPhase, EvaluationPhase, RunPhase
from optimize.schemas.progress import count_of
from optimize.store.db import find_by_id_prefix
from optimize.store.events import record
from optimize.store.tables import Comparison, Evaluation, EvaluationPrediction, JobEdge, Run
from optimize.training.server.branching import fan
from optimize.training.server.completion import run_model
from optimize.training.server.runs import find_run
from optimize.training.server.snapshots import find_snapshot, registered_model
from optimize.workloads.datasets import pick_chat_dataset, refuse_images
from optimize.workloads.models import resolve_model

KIND = "comparison"


@dataclass(frozen=True)
class Compared:
    """A model a comparison scores, before its evaluation is known."""

    model: str
    role: str
    run_id: str | None


# --- create ------------------------------------------------------------------------------------------------


def create(deployment: Deployment, request: ComparisonRequest) -> answers.Comparison:
    if not (request.candidates or request.branches or request.all_branches):
        raise Invalid("a comparison needs at least one candidate besides its source",
                      hint="name --candidate MODEL, --branch RUN or --all-branches PARENT (each may be repeated)")
    if request.promote is not None:
        check_alias(request.promote)
    with deployment.store.transaction() as session:  # the project first: a bundle grader's check counts against it
        project = session.get(Run, find_snapshot(session, request.source).run_id).project
    grader = evaluations.prepare_grader(deployment, _evaluation_request(request, request.source, project))
    token = current_token()
    with deployment.store.transaction() as session:
        snapshot = find_snapshot(session, request.source)
        open_project(session, project)  # an archived project starts no comparison
        source = Compared(registered_model(deployment, session, snapshot.id), "source", snapshot.run_id)
        compared, fans = _candidates(deployment, session, request, snapshot.id, source)
        dataset = pick_chat_dataset(session, request.dataset, project, "dataset")
        refuse_images(dataset, "dataset", "and a comparison evaluates text rows only")
        entries, edges = [], {}
        for item in [source, *compared]:
            found = evaluations.reusable(session, project, item.model, dataset.digest, grader.text,
                                         request.max_new_tokens)
            evaluation = found or evaluations.insert(deployment, session,
                                                     _evaluation_request(request, item.model, project), grader)
            entries.append({"model": item.model, "role": item.role, "runId": item.run_id,
                            "evaluationId": evaluation.id, "reused": found is not None})
            edges[evaluation.id] = graph.Edge("evaluation", evaluation.id,
                                              if_upstream_fails=graph.IfUpstreamFails.PROCEED)
        row = Comparison(
            id=new_id(), project=project, source_snapshot_id=snapshot.id, entries=entries,
            dataset_reference=dataset.reference, dataset_digest=dataset.digest, dataset_rows=dataset.rows,
            grader=grader.text, max_new_tokens=request.max_new_tokens, device_profile=request.device_profile or "cpu",
            promote=request.promote, margin=request.margin, phase=ComparisonPhase.EVALUATING.value,
            result={"fans": fans}, created_by=token[1][:64] if token else None, created_at=utcnow())
        session.add(row)
        session.flush()
        graph.add_edges(session, KIND, row.id, edges.values())
        record(session, COMPARISON.subject(row.id), "phase", phase=row.phase)
        queue_wake(session)
        return comparison_view(session, row)


def _evaluation_request(request: ComparisonRequest, model: str, project: str) -> EvaluationRequest:
    return EvaluationRequest.parse({
        "model": model, "dataset": request.dataset, "project": project, "deviceProfile": request.device_profile,
        "grader": request.grader, "graderInstructions": request.grader_instructions,
        "maxNewTokens": request.max_new_tokens})


def _candidates(deployment: Deployment, session, request: ComparisonRequest, snapshot_id: str, source: Compared
                ) -> tuple[list[Compared], list[dict[str, Any]]]:
    """The models compared besides the source, each once (the first role it was named in), and the fans read."""
    named: list[Compared] = []
    for text in request.candidates:
        reference, _model, _owner = resolve_model(deployment, session, text)
        named.append(Compared(reference, "candidate", _trained_by(session, reference)))
    for run_id in request.branches:
        named.append(_branch(session, find_run(session, run_id)))
    fans = []
    for parent_id in request.all_branches:
        parent = find_run(session, parent_id)
        children = fan(session, parent, snapshot_id)
        if not children:
            raise Invalid(f"run {parent.id[:12]} has no branch from snapshot {snapshot_id[:12]}",
                          hint=f"list its branches with: akka training runs branches {parent.id[:12]}")
        done = [c for c in children if c.phase == RunPhase.COMPLETED and run_model(session, c)]
        named += [_branch(session, child) for child in done]
        fans.append({"parentRunId": parent.id, "branches": len(children), "compared": len(done),
                     "skipped": [{"runId": c.id, "phase": c.phase} for c in children if c not in done]})
    seen, compared = {source.model}, []
    for item in named:
        if item.model not in seen:
            seen.add(item.model)
            compared.append(item)
    if not compared:
        raise Invalid("every candidate named is the source snapshot's own model; there is nothing to compare it with",
                      hint="name a candidate trained otherwise")
    if len(compared) > MOST_CANDIDATES:
        raise Refused(f"a comparison scores at most {MOST_CANDIDATES} candidates besides its source; this one names "
                      f"{len(compared)}", hint="compare fewer branches at a time")
    return compared, fans


def _branch(session, run: Run) -> Compared:
    if run.phase != RunPhase.COMPLETED:
        raise Refused(f"run {run.id[:12]} is {run.phase}; a branch is compared once it has completed",
                      hint=f"follow it with: akka training runs wait {run.id[:12]}", phase=run.phase)
    reference = run_model(session, run)
    if reference is None:
        raise NotFound(f"run {run.id[:12]} registered no model version")
    return Compared(reference, "branch", run.id)


def _trained_by(session, reference: str) -> str | None:
    """The run that trained a registered version (its lineage's producer), if a run did."""
    try:
        _model, version = resolve_model_reference(session, reference)
    except (Invalid, NotFound):
        return None  # a base model: no run trained it
    produced = (version.lineage or {}).get("producedBy") or {}
    return produced.get("id") if produced.get("kind") == "run" else None


# --- read --------------------------------------------------------------------------------------------------


def find_comparison(session, comparison_id: str) -> Comparison:
    return find_by_id_prefix(session, Comparison, comparison_id, "comparison",
                             "list comparisons with: akka training comparisons list",
                             visible_projects(Comparison.project))


def get(deployment: Deployment, comparison_id: str) -> answers.Comparison:
    with deployment.store.transaction() as session:
        return comparison_view(session, find_comparison(session, comparison_id))


def list_comparisons(deployment: Deployment, project: str | None, phase: str | None) -> answers.ComparisonList:
    query = select(Comparison).order_by(Comparison.created_at.desc())
    visible = visible_projects(Comparison.project)
    if visible is not None:
        query = query.where(visible)
    if project:
        query = query.where(Comparison.project == project.lower())
    if phase:
        query = query.where(Comparison.phase.in_(phases_asked(COMPARISON, phase, {"open": OPEN})))
    with deployment.store.transaction() as session:
        return answers.ComparisonList(comparisons=[comparison_view(session, row)
                                                   for row in session.scalars(query.limit(500))])


def comparison_view(session, row: Comparison) -> answers.Comparison:
    phases = _evaluation_phases(session, row)
    result = row.result or {}
    snapshot = find_snapshot(session, row.source_snapshot_id)
    ended = sum(1 for phase in phases.values() if EvaluationPhase(phase) in EVALUATION_ENDED)
    return answers.Comparison(
        comparison_id=row.id, project=row.project,
        source=answers.ComparisonSource(snapshot_id=snapshot.id, run_id=snapshot.run_id, step=snapshot.step,
                                        model=row.entries[0]["model"]),
        dataset={"reference": row.dataset_reference, "digest": row.dataset_digest, "rows": row.dataset_rows},
        grader=row.grader, max_new_tokens=row.max_new_tokens, device_profile=row.device_profile,
        entries=[answers.ComparisonEntry(model=e["model"], role=e["role"], run_id=e["runId"],
                                         evaluation_id=e["evaluationId"], reused=e["reused"],
                                         evaluation_phase=phases.get(e["evaluationId"], "REMOVED"))
                 for e in row.entries],
        fans=result.get("fans", []), phase=row.phase,
        count=count_of(KIND, row.phase, {"ended": ended, "total": len(phases)}),
        result=result.get("result"), scores=result.get("scores", []), winner=result.get("winner"),
        failed=result.get("failed", []), spend=result.get("spend"), promotion=result.get("promotion"),
        failure_reason=row.failure_reason, created_by=row.created_by, created_at=iso(row.created_at),
        finished_at=iso(row.finished_at), terminal=row.phase in TERMINAL, settled=row.phase in TERMINAL)


def _evaluation_phases(session, row: Comparison) -> dict[str, str]:
    ids = sorted({e["evaluationId"] for e in row.entries})
    return dict(session.execute(select(Evaluation.id, Evaluation.phase).where(Evaluation.id.in_(ids))).all())


def row_answers(deployment: Deployment, comparison_id: str, line: int) -> answers.ComparisonRow:
    """Every model's answer to one row of the dataset, in the entries' order."""
    with deployment.store.transaction() as session:
        row = find_comparison(session, comparison_id)
        if not 1 <= line <= row.dataset_rows:
            raise Invalid(f"line {line} is not a line of {row.dataset_reference}, which has {row.dataset_rows}",
                          hint=f"name a line from 1 to {row.dataset_rows}")
        found = {p.evaluation_id: p for p in session.scalars(select(EvaluationPrediction).where(
            EvaluationPrediction.evaluation_id.in_([e["evaluationId"] for e in row.entries]),
            EvaluationPrediction.line == line))}
        first = next(iter(found.values()), None)
        return answers.ComparisonRow(
            comparison_id=row.id, line=line, lines=row.dataset_rows,
            prompt=first.prompt if first else None, expected=first.expected if first else None,
            answers=[answers.RowAnswer(model=e["model"], role=e["role"],
                                       answer=_of(found, e, "answer"), score=_of(found, e, "score"),
                                       explanation=_of(found, e, "explanation")) for e in row.entries])


def _of(found: dict[str, EvaluationPrediction], entry: dict[str, Any], name: str) -> Any:
    prediction = found.get(entry["evaluationId"])
    return getattr(prediction, name) if prediction is not None else None


# --- cancel ------------------------------------------------------------------------------------------------


def cancel(deployment: Deployment, comparison_id: str) -> answers.Comparison:
    """Cancel it, and the evaluations it started that nothing else waits for (a reused evaluation is another's)."""
    def decide(session) -> answers.Comparison:
        row = find_comparison(session, comparison_id)
        if row.phase in TERMINAL:
            if row.phase == ComparisonPhase.CANCELLED:
                return comparison_view(session, row)
            raise Refused(f"comparison {row.id[:12]} is {row.phase}; there is nothing to cancel", phase=row.phase)
        moved(transition(session, COMPARISON, row, ComparisonPhase.CANCELLED), f"comparison {row.id[:12]}")
        for entry in row.entries:
            evaluation = session.get(Evaluation, entry["evaluationId"])
            if (entry["reused"] or evaluation is None or EvaluationPhase(evaluation.phase) in EVALUATION_ENDED
                    or _waited_for_by_others(session, evaluation.id, row.id)):
                continue
            moved(transition(session, EVALUATION, evaluation, EvaluationPhase.CANCELLED,
                             note=f"its comparison {row.id[:12]} was cancelled"), f"evaluation {evaluation.id[:12]}")
        return comparison_view(session, row)

    return decided(deployment.store, decide)


def _waited_for_by_others(session, evaluation_id: str, comparison_id: str) -> bool:
    waiting = session.scalars(select(JobEdge.job_id).where(
        JobEdge.upstream_kind == "evaluation", JobEdge.upstream_id == evaluation_id, JobEdge.kind == KIND,
        JobEdge.job_id != comparison_id)).all()
    return bool(waiting) and session.scalar(select(Comparison.id).where(
        Comparison.id.in_(waiting), Comparison.phase.in_(COMPARISON.values(OPEN))).limit(1)) is not None


# --- the server's step: score ------------------------------------------------------------------------------


def score(deployment: Deployment, comparison_id: str) -> None:
    """Score a comparison whose evaluations have ended (in SCORING): rank the models scored, name the winner of a
    Complete result, count the spend, promote when asked and the margin clears; COMPLETED, or FAILED when no model
    could be scored. Scoring the same answers again gives the same result (seeded resampling)."""
    with deployment.store.transaction() as session:
        row = session.get(Comparison, comparison_id)
        if row is None or row.phase != ComparisonPhase.SCORING:
            return
        evaluations_by_id = {e.id: e for e in session.scalars(select(Evaluation).where(
            Evaluation.id.in_([entry["evaluationId"] for entry in row.entries])))}
        scores: dict[str, dict[int, float | None]] = {}
        failed = []
        for entry in row.entries:
            evaluation = evaluations_by_id.get(entry["evaluationId"])
            if evaluation is not None and evaluation.phase == EvaluationPhase.COMPLETED:
                scores[entry["model"]] = evaluations.row_scores(session, evaluation.id)
            else:
                failed.append(answers.ComparisonFailure(
                    model=entry["model"], evaluation_id=entry["evaluationId"],
                    phase=evaluation.phase if evaluation is not None else "REMOVED",
                    reason=evaluation.failure_reason if evaluation is not None else "the evaluation was removed"))
        scored = [s for s in (intervals.scored(model, lines) for model, lines in scores.items()) if s is not None]
        failed += [answers.ComparisonFailure(model=model, evaluation_id=_entry(row, model)["evaluationId"],
                                             phase=EvaluationPhase.COMPLETED.value,
                                             reason="its grader scored none of its answers")
                   for model in scores if model not in {s.model for s in scored}]
        if not scored:
            said = "; ".join(f"{f.model}: evaluation {f.evaluation_id[:12]} {f.phase}"
                             + (f" ({f.reason})" if f.reason else "") for f in failed)
            # lost: it was cancelled meanwhile, and the next tick finds it no longer SCORING
            moved(transition(session, COMPARISON, row, ComparisonPhase.FAILED,
                             failure_reason=f"no model could be scored: {said}"), f"comparison {row.id[:12]}")
            return
        ranking = intervals.ranked(scored)
        complete = not failed
        margin = intervals.winner_margin(ranking, scores) if complete else None
        source = next((s for s in scored if s.model == row.entries[0]["model"]), None)
        winner = None
        if margin is not None:
            top = ranking[0]
            winner = answers.ComparisonWinner(
                model=top.model, role=_entry(row, top.model)["role"], mean_score=top.mean, runner_up=margin.runner_up,
                margin=margin.margin, margin_low=margin.low, margin_high=margin.high)
        result = {
            **(row.result or {}), "result": "Complete" if complete else "Partial",
            "scores": [answers.ComparisonScore(
                model=s.model, role=_entry(row, s.model)["role"], mean_score=s.mean, low=s.low, high=s.high,
                rows=s.rows, versus_source=None if source is None or s is source else s.mean - source.mean
            ).model_dump(by_alias=True) for s in ranking],
            "winner": winner.model_dump(by_alias=True) if winner else None,
            "failed": [f.model_dump(by_alias=True) for f in failed],
            "spend": _spend(session, row).model_dump(by_alias=True),
            "promotion": _promote(session, row, complete, winner),
        }
        # lost: it was cancelled meanwhile; the promotion is rolled back with the rest of this transaction
        moved(transition(session, COMPARISON, row, ComparisonPhase.COMPLETED, result=result),
              f"comparison {row.id[:12]}")


def _entry(row: Comparison, model: str) -> dict[str, Any]:
    return next(e for e in row.entries if e["model"] == model)


def _promote(session, row: Comparison, complete: bool, winner: answers.ComparisonWinner | None
             ) -> dict[str, Any] | None:
    """Move the alias asked for to the winner, on the winner's own model, when the result is Complete and the
    margin is at least the least asked; otherwise say why not."""
    if row.promote is None:
        return None
    why_not = ("the result is Partial" if not complete else "no model won (the top two tie)" if winner is None
               else f"the winner's margin {winner.margin:.4g} is short of the least {row.margin:g}"
               if winner.margin < row.margin else None)
    promoted, moved_now = None, False
    if why_not is None:
        model, version = resolve_model_reference(session, winner.model)
        moved_now = move_alias(session, MODELS, model, row.promote, version,
                               by=row.created_by or f"comparison {row.id[:12]}")
        promoted = winner.model
    return answers.Promotion(alias=row.promote, least_margin=row.margin, model=promoted, moved=moved_now,
                             why_not=why_not).model_dump(by_alias=True)


def _spend(session, row: Comparison) -> answers.ComparisonSpend:
    """Training's spend (the compared models' runs) apart from the comparison's own (the evaluations it started)."""
    runs = {e["runId"] for e in row.entries if e["runId"]}
    training = sum((run.cost or {}).get("deviceSeconds") or 0.0
                   for run in session.scalars(select(Run).where(Run.id.in_(runs))))
    started = [e["evaluationId"] for e in row.entries if not e["reused"]]
    comparison = device_seconds(session, "evaluation", started)
    return answers.ComparisonSpend(
        training=answers.Spend(device_seconds=round(training, 1)),
        comparison=answers.Spend(device_seconds=round(comparison, 1)),
        evaluations_started=len(set(started)), evaluations_reused=len({e["evaluationId"] for e in row.entries
                                                                       if e["reused"]}))
