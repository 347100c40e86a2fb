"""Runs as users see them: submit a plan, read a run, annotate it, list runs, read metrics, rollouts and snapshots.

A submission is idempotent by `submissionId`: the same id reaches the same run, never a second one; the same id
with another plan is refused. Admission freezes every reference and default (training.admission.resolve); the
run then waits in QUEUED for the scheduler.

What runs a plan's user code — its rule terms' bundles imported, a dry run's reward on rows and sampled groups —
runs in the server's bounded pool (`core.user_code`, 429 past the token's or the project's limit) and before the
submission's transaction opens, so no database connection or project row lock waits on it (only a bundle whose
alias moved in between is checked again inside it).
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select

from optimize.core import user_code
from optimize.core.access import visible_projects
from optimize.core.clock import iso, utcnow
from optimize.core.errors import Conflict, Invalid, NotFound, PlatformError, Refused
from optimize.core.ids import new_id
from optimize.deployment import Deployment
from optimize.jobs import graph
from optimize.jobs import registry as job_kinds
from optimize.jobs.effects import queue_wake
from optimize.jobs.lifecycle import phases_asked
from optimize.jobs.waiting import waiting_for
from optimize.projects.quotas import check_new_work
from optimize.projects.service import open_project, project_work
from optimize.registry.datasets import examples_objects
from optimize.registry.namespaces import refuse_if_archived
from optimize.schemas import runs as answers
from optimize.schemas.common import BaseModelPin
from optimize.schemas.phases import AnalysisPhase
from optimize.schemas.plans import parse_plan
from optimize.schemas.resolved import ResolvedReinforcement, ResolvedReward, ResolvedTerm
from optimize.scoring.groups import MOSTLY_CONSTANT
from optimize.store.db import find_by_id_prefix, insert_ignoring_conflict
from optimize.store.events import record
from optimize.store.tables import BaseModelSelection, Run, RunMetric, RunRollout, Snapshot
from optimize.training.admission.diagnostics import ReadLimits, diagnose
from optimize.training.admission.layout import check_layout
from optimize.training.admission.lengths import Subject, analysis_for, evaluate, refusal
from optimize.training.admission.lengths import record as record_check
from optimize.training.admission.resolve import Admitted, admit, check_pause_at_step, resolve_terms
from optimize.training.admission.reward_check import groups_check, newest_sampling, reward_check
from optimize.training.admission.source import source_start
from optimize.training.methods import method_for, rewarded
from optimize.training.server import hparams, loss_compare
from optimize.training.server.attempts import current_attempt
from optimize.training.server.phases import OPEN, RUN, RunPhase
from optimize.training.server.prediction import expected_mfu, predict, unavailable
from optimize.training.server.views import metric_view, run_view, snapshot_view
from optimize.workloads.estimates import estimate
from optimize.workloads.lengths import lengths_file
from optimize.workloads.throughput import estimate_scaled


def submit(deployment: Deployment, document: Any, branch: dict[str, Any] | None = None,
           pipeline: dict[str, str] | None = None) -> tuple[answers.Run, bool]:
    """Admit a plan as a QUEUED run, or reach the run its submissionId already names; returns (run, created).
    A branch (training.server.branching) passes the snapshot it starts from and its restore mode; a pipeline's
    train stage passes its pipeline and stage ({pipelineId, stage})."""
    if not isinstance(document, dict):
        raise Invalid("the run plan must be one JSON object (kind: run, project, baseModel, config, …)")
    plan = parse_plan(document)
    digest = hashlib.sha256(json.dumps({k: v for k, v in document.items() if k != "submissionId"},
                                       sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    submission_id = plan.submission_id or new_id()
    with deployment.store.transaction() as session:
        existing = session.scalar(select(Run).where(Run.submission_id == submission_id))
        if existing is not None:
            return _same_submission(existing, digest), False
    entry = deployment.catalog.find(plan.base_model)
    checked = _check_rule_bundles(deployment, plan)
    with deployment.store.transaction() as session:
        project, admitted, branch = _admit(deployment, session, plan, document, entry, branch, checked)
        refuse_kl_on_inherited_policy(admitted, branch)
        check_new_work(session, project.name, "run", deployment.quotas)
        sections, state, to_analyze = check_lengths(deployment, session, admitted, plan)
        # the pre-flight estimate, where the analysis is done; a run that waits for it records it before its claim
        preflight = predict(deployment.blobs, session, plan, entry, admitted.dataset.digest, admitted.commit,
                            admitted.resolved.config.packing)
        check_packed_pause(plan, preflight)
        if preflight is None and state != "waiting":
            preflight = unavailable(admitted.dataset.prepared is not None)
        now = utcnow()
        run_id = new_id()
        inserted = insert_ignoring_conflict(session, Run, {
            "id": run_id, "submission_id": submission_id, "submission_digest": digest, "project": project.name,
            "method": plan.config.method, "phase": RunPhase.QUEUED.value, "attempt": 0, "plan": document,
            "resolved": admitted.resolved.document(), "sources": admitted.sources, "config_hash": admitted.config_hash,
            "base_entry_id": entry.id, "base_commit": admitted.commit,
            "dataset_reference": admitted.dataset.reference, "dataset_digest": admitted.dataset.digest,
            "dataset_rows": admitted.dataset.rows,
            "validation_reference": admitted.validation.reference if admitted.validation else None,
            "validation_digest": admitted.validation.digest if admitted.validation else None,
            "model_name": admitted.model_name, "device_profile": plan.execution.device_profile,
            "device_count": admitted.device_count, "description": plan.description,
            "config_name": plan.config_name or None,
            "warnings": admitted.warnings,
            "length_check": record_check(sections, state),
            "parent_run_id": branch["parentRunId"] if branch else None, "branch": branch, "pipeline": pipeline,
            "progress": {}, "results": {}, "cost": {}, "phase_times": {"QUEUED": [[iso(now), None]]},
            "created_at": now, "prediction": preflight, "memory": admitted.memory,
        }, ["submission_id"]) == 1
        run = session.scalar(select(Run).where(Run.submission_id == submission_id))
        if not inserted:  # another request with the same id won the race
            return _same_submission(run, digest), False
        record(session, RUN.subject(run.id), "phase", phase=RunPhase.QUEUED.value)
        if state == "waiting":  # the analyses under way; those it starts below get theirs as they are started
            _wait_for_analyses(deployment, session, run_id, now, [s["analysisId"] for s in sections
                                                                  if s["status"] in ("pending", "running")])
        queue_wake(session)
        body = run_view(run)
    waits = (lambda session, analysis_id: _wait_for_analyses(deployment, session, run_id, now, [analysis_id])
             ) if state == "waiting" else None
    for reference in to_analyze:  # measured while the run waits; the check then runs before devices are claimed
        job_kinds.kind("analysis").start_upstream(deployment, {"dataset": reference, "model": entry.id}, waits)
    return body, True


def _wait_for_analyses(deployment: Deployment, session, run_id: str, submitted: datetime,
                       analysis_ids: list[str]) -> None:
    """The run's edges to the analyses its length check waits for (`jobs.graph`), in the caller's transaction (the
    run's, or the analysis's as it is started): it takes their reports, goes on unchecked when one fails, and waits
    at most `analysis_wait_seconds` from its submission; its check (`RunKind.before_grant`) then reads them."""
    until = submitted + timedelta(seconds=deployment.analysis_wait_seconds)
    graph.add_edges(session, "run", run_id, [
        graph.Edge("analysis", analysis_id, output="report", if_upstream_fails=graph.IfUpstreamFails.PROCEED,
                   waits_until=until) for analysis_id in analysis_ids])


def dry_run(deployment: Deployment, document: Any, starts_from: str | None = None,
            branch: dict[str, Any] | None = None) -> answers.DryRun:
    """Everything a submission checks, with nothing started (no run, no analysis): the resolved settings with
    their sources, the envelope verdict, the Lengths section and the datasets' diagnostics; for a reinforcement run,
    its reward on the rows' own answers and on the groups a sampling evaluation sampled from the model it starts
    from (`starts_from`: a branch's registered adapter; the base model otherwise)."""
    if not isinstance(document, dict):
        raise Invalid("the run plan must be one JSON object (kind: run, project, baseModel, config, …)")
    plan = parse_plan(document)
    entry = deployment.catalog.find(plan.base_model)
    checked = _check_rule_bundles(deployment, plan)
    with deployment.store.transaction() as session:
        project, admitted, branch = _admit(deployment, session, plan, document, entry, branch, checked)
        refuse_kl_on_inherited_policy(admitted, branch)
        starts_from = starts_from or ((branch or {}).get("source") or {}).get("model")
        sections, state, _ = check_lengths(deployment, session, admitted, plan)
        # the rows' duplicates and shapes: of JSON rows (prepared token rows are described by their version)
        objects = {s.reference: examples_objects(session, s.digest) for s in subjects(admitted) if not s.prepared}
        rewarded = method_for(plan.config.method).rewarded
        sampling, groups = (newest_sampling(session, starts_from or entry.id, admitted.dataset.digest)
                            if rewarded else (None, []))
        estimates = _rollout_estimates(deployment, session, admitted, plan) if rewarded else None
        preflight = None if rewarded else predict(deployment.blobs, session, plan, entry, admitted.dataset.digest,
                                                   admitted.commit, admitted.resolved.config.packing)
        check_packed_pause(plan, preflight)
    limits = ReadLimits.from_env()
    opener = lambda sha256: deployment.blobs.open_held(sha256, f"dataset shard sha256:{sha256}")  # noqa: E731
    warnings = list(admitted.warnings)
    reinforcement = {}
    resolved = admitted.resolved.document()
    if rewarded:
        config = admitted.resolved.config
        reinforcement = {**user_code.call(f"reward check of a {plan.config.method} dry run", _reward_checks,
                                          deployment, config, starts_from or entry.id, project.name,
                                          admitted.dataset.reference, sampling, groups, objects, opener, warnings,
                                          project=project.name),
                         "estimates": estimates}  # DryRun's fields, by name
    return answers.DryRun(
        dry_run=True, project=project.name, base_model=BaseModelPin(id=entry.id, commit=admitted.commit),
        model_name=admitted.model_name, config_hash=admitted.config_hash,
        resolved={"config": resolved["config"], "execution": resolved["execution"],
                  "sources": admitted.sources, "lengths": sections},
        envelope=answers.EnvelopeVerdict(status="unmeasured" if admitted.warnings else "measured",
                                         mode="strict" if deployment.catalog.strict_envelopes else "advisory"),
        warnings=warnings,
        source=(branch or {}).get("source"),
        length_check=record_check(sections, state),
        memory={**admitted.memory, "measuredGiB": None, "reservedGiB": None, "startCheckGiB": None, "ratio": None},
        diagnostics=[diagnose(reference, items, opener, limits) for reference, items in objects.items()],
        estimate=preflight, expected_mfu=expected_mfu(preflight, entry, _accelerator(deployment, plan),
                                                      admitted.device_count, admitted.resolved.config.model.trains),
        **reinforcement,
    )


def check_packed_pause(plan, preflight: dict[str, Any] | None) -> None:
    """A packed run's updates are counted over its bins once an analysis measured its rows: its
    `execution.pauseAtStep` must fall before the last of those (admission checked it against the unpacked rows)."""
    if preflight and (preflight.get("packing") or {}).get("bins"):
        check_pause_at_step(plan.execution.pause_at_step, preflight["steps"])


def _accelerator(deployment: Deployment, plan) -> str | None:
    profile = next((p for p in deployment.profiles if p.name == plan.execution.device_profile), None)
    return profile.accelerator if profile is not None and profile.kind == "gpu" else None


def _rollout_estimates(deployment: Deployment, session, admitted: Admitted, plan) -> dict[str, Any]:
    """A reinforcement run's steps and rollouts, and its tokens and time where its dataset's analysis is done (the
    analysis a supervised run's estimate reads; `workloads.estimates`)."""
    analysis = analysis_for(session, deployment.blobs, admitted.dataset.digest, admitted.commit)
    done = analysis is not None and analysis.phase == AnalysisPhase.DONE and analysis.lengths_sha256
    lengths = lengths_file(deployment.blobs, analysis.id, analysis.lengths_sha256) if done else None
    return estimate_scaled(session, estimate({"rows": admitted.dataset.rows}, lengths, plan, admitted.entry), plan,
                           admitted.entry.id)


def _reward_checks(deployment: Deployment, config: ResolvedReinforcement, model: str, project: str, dataset: str,
                   sampling, groups, objects, opener, warnings: list[str]) -> dict[str, Any]:
    """The dry run's reward on the rows' own answers and on the sampled groups (on a worker of the user-code pool)."""
    return {"reward_check": reward_check(config, objects[dataset], opener, deployment.blobs.held_path),
            "groups_check": _groups_check(deployment, config, model, project, dataset, sampling, groups, objects,
                                          opener, warnings)}


def _groups_check(deployment: Deployment, config: ResolvedReinforcement, model: str, project: str, dataset: str,
                  sampling, groups, objects, opener, warnings: list[str]) -> dict[str, Any]:
    """The run's reward on the groups sampled from `model` (see `reward_check.groups_check`), with a warning when it
    is constant on most of them; or, with no sampling evaluation to read, the command that makes one."""
    rl = config.rl_hyperparams
    if sampling is None:
        return {"evaluationId": None, "model": model, "command": (
            f"akka training evaluations start --model {model} --project {project} --dataset {dataset} --generations "
            f"{min(rl.generations, 16)} --temperature {rl.temperature:g} --rows 64 "
            f"--max-new-tokens {rl.max_completion_length} --wait")}
    checked = groups_check(config, groups, objects[dataset], opener, deployment.blobs.held_path)
    share = checked["zeroVarianceShare"]
    if share is not None and share > MOSTLY_CONSTANT:
        warnings.append(f"the reward is constant on {share:.0%} of the {checked['groups']} prompt groups sampled from "
                        f"{model} (evaluation {sampling.id[:12]}): a GRPO update learns nothing from a group whose "
                        "answers all score the same; vary the reward (partial credit), or sample more or hotter "
                        "answers (generations, temperature)")
    return {"evaluationId": sampling.id, "model": model, **sampling.model["sampling"], **checked}


def refuse_kl_on_inherited_policy(admitted: Admitted, branch: dict[str, Any] | None) -> None:
    """A reinforcement run on more than one GPU takes no KL penalty when it trains an inherited adapter (a branch
    of another run): its reference policy, the inherited adapter, is not held on every device (release notes,
    "Omitted klBeta")."""
    config = admitted.resolved.config
    if branch is None or admitted.device_count <= 1:
        return
    kl = method_for(config.method).kl_penalty(config)
    if kl > 0:
        stated = "stated" if admitted.sources.get("config.rlHyperparams.klBeta") == "stated" else "the default"
        inherited = (f"the weights of {branch['source']['model']}" if branch.get("source") else
                     f"a {branch['restore']} branch of run {branch['parentRunId'][:12]}")
        raise Refused(f"a {config.method} run on {admitted.device_count} GPUs that trains the adapter it inherits "
                      f"({inherited}) takes no KL penalty; rlHyperparams.klBeta is {kl:g} ({stated})",
                      hint="Set klBeta to 0, or train without inheriting a policy.")


def _admit(deployment: Deployment, session, plan, document: dict[str, Any], entry,
           branch: dict[str, Any] | None = None, checked: frozenset[tuple[str, str]] = frozenset()
           ) -> tuple[Any, Admitted, dict[str, Any] | None]:
    """The project, the admitted plan and where it starts: a branch's record, or a `source.model` start (which
    joins the configuration hash: a run from an adapter is another configuration than one from the base). The rule
    terms' bundles are checked to import unless `checked` (by `_check_rule_bundles`) holds each as resolved now."""
    project = open_project(session, plan.project)
    refuse_if_archived(session, project.name)
    admitted = admit(session, plan, document, entry, session.get(BaseModelSelection, entry.id), deployment.profiles,
                     deployment.catalog.strict_envelopes)
    if plan.source is not None:
        if branch is not None:
            raise Invalid("a branch starts from its parent's save; it takes no source.model",
                          hint="remove source from the overrides")
        branch, admitted.resolved = source_start(session, plan, admitted.resolved, entry, admitted.commit)
        lora = json.dumps(admitted.resolved.config.trained_with.lora.model_dump(by_alias=True, mode="json"),
                          sort_keys=True)
        admitted.config_hash = hashlib.sha256(
            f"{admitted.config_hash}:{branch['source']['model']}:{lora}".encode()).hexdigest()
    config = admitted.resolved.config
    terms = _reward_terms(config)
    if not _rule_bundles(terms) <= checked:  # an alias moved since they were checked: checked again, here
        _check_references(deployment, plan.config.method, terms, project.name)
    check_layout(entry, config.method, config.model.precision, plan.execution.device_profile,
                 admitted.device_count, config.max_seq_length, deployment.profiles)
    return project, admitted, branch


def _check_rule_bundles(deployment: Deployment, plan) -> frozenset[tuple[str, str]]:
    """Each rule term's bundle imports and names its function (the method's `check_references`), checked before the
    submission's transaction opens. The (archive digest, function) pairs checked: none when the plan has no rule
    term, or one admission refuses anyway (naming the term, as it always has)."""
    reward = plan.config.reward
    if not method_for(plan.config.method).rewarded or reward is None or not any(t.kind == "rule"
                                                                                 for t in reward.terms):
        return frozenset()
    from optimize.scoring.terms import check_term

    try:
        for index, term in enumerate(reward.terms):
            check_term(term.model_dump(by_alias=True, exclude_none=True), f"config.reward.terms[{index}]")
        rules = [ResolvedTerm.model_validate({**term.model_dump(by_alias=True, exclude_unset=True), "name": term.kind})
                 for term in reward.terms if term.kind == "rule"]
        with deployment.store.transaction() as session:
            rules = resolve_terms(session, rules)
    except PlatformError:
        return frozenset()
    _check_references(deployment, plan.config.method, rules, plan.project)
    return _rule_bundles(rules)


def _check_references(deployment: Deployment, method: str, terms: list[ResolvedTerm], project: str) -> None:
    user_code.call(f"bundle import check of a {method} plan", method_for(method).check_references, terms,
                   deployment.blobs, project=project)


def _reward_terms(config) -> list[ResolvedTerm]:
    """A resolved config's reward terms (a reinforcement run's; none for a run that is not scored by them)."""
    return list(config.reward.terms) if isinstance(config.reward, ResolvedReward) else []


def _rule_bundles(terms: list[ResolvedTerm]) -> frozenset[tuple[str, str]]:
    return frozenset((term.bundle_sha256, term.function) for term in terms if term.kind == "rule")


def subjects(admitted: Admitted) -> list[Subject]:
    picks = [("training", admitted.dataset)] + ([("validation", admitted.validation)] if admitted.validation else [])
    return [Subject(role, pick.reference, pick.digest, pick.prepared) for role, pick in picks]


def check_lengths(deployment: Deployment, session, admitted: Admitted, plan) -> tuple[list[dict], str, list[str]]:
    """The length and template check at submission: refused now where an analysis is done; otherwise the run
    waits for the analyses to start (one device), or the check does not run (several devices). Returns the
    Lengths sections, the check's state and the datasets to analyze."""
    config = plan.config
    if not method_for(config.method).length_checked:  # e.g. a prompt's budget, checked as the worker renders it
        return [], "notRun", []
    sections, state = evaluate(session, deployment.blobs, subjects(admitted), admitted.entry.id, admitted.commit,
                               config.max_seq_length, config.data.truncation)
    reason = refusal(sections, config.data.truncation, config.max_seq_length, admitted.entry.id)
    if reason:
        raise Refused(f"the run is refused before it claims a device: {reason}",
                      hint="see the rows' lengths with: akka training runs start -f PLAN --dry-run")
    to_analyze = [s["dataset"] for s in sections if s["status"] in ("none", "failed") and s.get("command")]
    if state == "waiting" and admitted.device_count > 1:
        state, to_analyze = "notRun", []  # a run on several devices uses an analysis only if one is done
    return sections, state, to_analyze


def _same_submission(run: Run, digest: str) -> answers.Run:
    if run.submission_digest != digest:
        raise Conflict(f"submissionId {run.submission_id!r} was used for another plan (run {run.id[:12]})",
                       hint="use a new submissionId for a different plan, or leave it out")
    return run_view(run)


def find_run(session, run_id: str) -> Run:
    return find_by_id_prefix(session, Run, run_id, "run", "list runs with: akka training runs list",
                             visible_projects(Run.project))


def get_run(deployment: Deployment, run_id: str, settings: bool = False) -> answers.Run:
    with deployment.store.transaction() as session:
        return run_status(deployment, session, find_run(session, run_id), settings)


def annotate_run(deployment: Deployment, run_id: str, description: str | None, config_name: str | None
                 ) -> answers.Run:
    """Set a run's notes: its description and its column in the scores tables (`config_name`). A field given as
    None stays as it is; an empty string clears it. A run of an archived project takes notes too (archiving stops
    new work, as a registry namespace's description may still change once it is archived)."""
    if description is None and config_name is None:
        raise Refused("the annotation names no field: give description, configName or both",
                      hint="an empty string clears a field; a field left out stays as it is")
    with deployment.store.transaction() as session:
        run = find_run(session, run_id)
        changed: dict[str, str | None] = {}
        if description is not None:
            run.description = changed["description"] = description or None
        if config_name is not None:
            run.config_name = changed["configName"] = config_name or None
        record(session, RUN.subject(run.id), "annotated", **changed)  # its status streams show the notes
        return run_status(deployment, session, run)


def run_status(deployment: Deployment, session, run: Run, settings: bool = False) -> answers.Run:
    """The run as `get` and its event stream show it: with what it waits for while it is queued."""
    return run_view(run, current_attempt(session, run), settings=settings).extended(
        waiting_for=waiting_for(session, deployment, "run", run))


def list_runs(deployment: Deployment, project: str | None = None, phase: str | None = None,
              include_archived: bool = False) -> list[answers.RunListItem]:
    """Runs, newest first. Runs of archived projects only with `include_archived` or when their project is named;
    each row says whether its project is archived (`projectArchived`)."""
    query = project_work(Run, project, include_archived)
    if phase:
        query = query.where(Run.phase.in_(phases_asked(RUN, phase, {"open": OPEN})))
    with deployment.store.transaction() as session:
        return [run_view(run).extended(answers.RunListItem, project_archived=archived)
                for run, archived in session.execute(query.limit(500))]


def run_metrics(deployment: Deployment, run_id: str, limit: int | None = None) -> answers.RunMetrics:
    with deployment.store.transaction() as session:
        run = find_run(session, run_id)
        rows = session.scalars(select(RunMetric).where(RunMetric.run_id == run.id)
                               .order_by(RunMetric.step, RunMetric.kind)).all()
        steps = [metric_view(m) for m in rows if m.kind == "train"]
        validation = [metric_view(m) for m in rows if m.kind == "validation"]
        if limit:
            steps = steps[-limit:]
        return answers.RunMetrics(run_id=run.id, steps=steps, validation=validation)


def compare_runs(deployment: Deployment, run_id: str, baseline_id: str, window: int = loss_compare.DEFAULT_WINDOW,
                 spike_factor: float = loss_compare.DEFAULT_SPIKE_FACTOR, margin: float = loss_compare.DEFAULT_MARGIN,
                 across_plans: bool = False, align: loss_compare.Align = "step") -> answers.LossComparison:
    """Two sft runs' training losses compared window by window, on what each has logged so far
    (`training.server.loss_compare`)."""
    with deployment.store.transaction() as session:
        sides = []
        for ref in (run_id, baseline_id):
            run = find_run(session, ref)
            points = session.scalars(select(RunMetric).where(RunMetric.run_id == run.id, RunMetric.kind == "train")
                                     .order_by(RunMetric.step)).all()
            validation = ((run.validation_reference, run.validation_digest) if run.validation_digest else None)
            sides.append(loss_compare.Side(
                run_id=run.id, method=run.method, phase=run.phase, project=run.project,
                points=[{**m.values, "step": m.step} for m in points],
                plan=loss_compare.plan_facts(run.base_entry_id, run.base_commit,
                                             (run.dataset_reference, run.dataset_digest), validation, run.resolved)))
    return loss_compare.compare(*sides, window=window, spike_factor=spike_factor, margin=margin,
                                across_plans=across_plans, align=align)


def run_hparams(deployment: Deployment, run_id: str, against: str | None = None) -> answers.RunHparams:
    """The run's flattened hyperparameters with their sha, and where they differ from another run's."""
    with deployment.store.transaction() as session:
        run = find_run(session, run_id)
        return hparams.hparams(run, find_run(session, against) if against else None)


def run_rollouts(deployment: Deployment, run_id: str, step: int | None = None) -> answers.RunRollouts:
    """The rollouts recorded at `step` (default: the newest update recorded) and the updates that have some. A
    supervised or preference run is refused naming its method; a step without a record is not found, naming the
    steps with one."""
    with deployment.store.transaction() as session:
        run = find_run(session, run_id)
        methods = " and ".join(sorted(rewarded()))
        if run.method not in rewarded():
            raise Refused(f"run {run.id[:12]} is {_article(run.method)} {run.method} run; rollouts are recorded for "
                          f"{methods} runs", hint=f"read its metrics with: akka training runs metrics {run.id[:12]}")
        steps = list(session.scalars(select(RunRollout.step).where(RunRollout.run_id == run.id)
                                     .order_by(RunRollout.step)))
        if step is not None and step not in steps:
            recorded = f"the steps recorded are {step_ranges(steps)}" if steps else "it has recorded none yet"
            raise NotFound(f"run {run.id[:12]} recorded no rollouts at step {step}; {recorded}",
                           hint="leave out --step for the newest one" if steps else
                           "rollouts are recorded as the run trains, one sample per update")
        chosen = step if step is not None else (steps[-1] if steps else None)
        record = session.get(RunRollout, (run.id, chosen)) if chosen is not None else None
        terms = ((run.resolved or {}).get("config", {}).get("reward") or {}).get("terms") or []  # as stored
        return answers.RunRollouts(
            run_id=run.id, method=run.method, phase=run.phase,
            terms=[answers.RolloutTerm(name=t["name"], weight=t.get("weight", 1.0)) for t in terms],
            steps=steps, step=chosen,
            attempt=record.attempt if record else None, recorded_at=iso(record.at) if record else None,
            items=list(record.items) if record else [],  # as recorded
        )


def step_ranges(steps: list[int]) -> str:
    """Sorted steps as runs of consecutive ones: 1-3, 5, 8-9."""
    runs: list[list[int]] = []
    for step in steps:
        if runs and step == runs[-1][1] + 1:
            runs[-1][1] = step
        else:
            runs.append([step, step])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _article(method: str) -> str:
    """"an" before a method named by letters that sound with a vowel first (sft: "an sft run"), else "a"."""
    return "an" if method and method[0] in "aefhilmnorsx" else "a"


def run_snapshots(deployment: Deployment, run_id: str) -> answers.RunSnapshots:
    with deployment.store.transaction() as session:
        run = find_run(session, run_id)
        items = session.scalars(select(Snapshot).where(Snapshot.run_id == run.id)
                                .order_by(Snapshot.attempt, Snapshot.step)).all()
        return answers.RunSnapshots(run_id=run.id, snapshots=[snapshot_view(s) for s in items])
