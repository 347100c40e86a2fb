"""Pipelines as users see them — start (every stage checked that can be before anything starts; `--dry-run` stops
there), read, list, cancel, resume — and the server's step that moves a running pipeline on.

Stages run one after another, each as a job of its own kind: a train stage a run (linked to the pipeline: the
run's `pipeline`), an evaluate stage an evaluation, a distill stage a distillation. A stage starts once every stage
before it completed, with each `@STAGE` it names replaced by what that stage gave (the model version its run
registered, the dataset version its curation or distillation registered), and is checked then as its kind checks a
submission; a train stage that lists several datasets first registers them together as one version (`mixes`).
Each stage's state is read from its job, never copied: the pipeline keeps only which job a stage started (and how
many times), so a server restart or a lost worker is its job kind's to recover — a run goes on from its last save —
and the pipeline's step, taken up again at the next tick, finds it where it is.

An evaluate stage with `minMeanScore` is a gate: below it, the pipeline ends FAILED naming the stage, its score and
the gate, and the later stages are skipped. A stage whose job failed ends the pipeline FAILED; `resume` starts that
stage again (a new job) and goes on, keeping every stage that completed.
"""

from __future__ import annotations

import copy
from typing import Any

from sqlalchemy import select

from optimize.core.access import current_token, visible_projects
from optimize.core.clock import iso, utcnow
from optimize.core.errors import Conflict, PlatformError, Refused
from optimize.core.ids import new_id
from optimize.curation import service as curations
from optimize.deployment import Deployment
from optimize.distillation import service as distillations
from optimize.evaluation import service as evaluations
from optimize.jobs import registry as job_kinds
from optimize.jobs.effects import queue_wake
from optimize.jobs.leases import device_seconds
from optimize.jobs.lifecycle import decided, moved, phases_asked, transition
from optimize.pipelines.mixes import mix_target, mixable, register_mix
from optimize.pipelines.phases import OPEN, PIPELINE, TERMINAL
from optimize.pipelines.plans import Stage, read_plan
from optimize.projects.service import open_project
from optimize.registry.archival import refuse_if_archived
from optimize.schemas import pipelines as answers
from optimize.schemas.curations import CurationRequest
from optimize.schemas.distillations import DistillationRequest
from optimize.schemas.evaluations import EvaluationRequest
from optimize.schemas.phases import PipelinePhase
from optimize.schemas.plans import parse_plan
from optimize.schemas.progress import count_of
from optimize.store.db import find_by_id_prefix
from optimize.store.events import record
from optimize.store.tables import Curation, Distillation, Evaluation, Pipeline, Run
from optimize.training.admission.source import refuse_stated_lora
from optimize.training.server import lifecycle as run_lifecycle
from optimize.training.server import runs
from optimize.training.server.completion import run_model
from optimize.workloads.datasets import pick_chat_dataset, refuse_images
from optimize.workloads.models import resolve_model

# --- start -------------------------------------------------------------------------------------------------


def start(deployment: Deployment, document: Any, dry: bool = False, show_resolved: bool = False
          ) -> answers.Pipeline | answers.PipelineDryRun:
    plan, stages = read_plan(document)
    checked = [_check_now(deployment, plan.project, stage, show_resolved) for stage in stages]
    if dry:
        return answers.PipelineDryRun(dry_run=True, project=plan.project.lower(), stages=checked)
    token = current_token()
    submission = plan.submission_id or new_id()
    with deployment.store.transaction() as session:
        existing = session.scalar(select(Pipeline).where(Pipeline.submission_id == submission))
        if existing is not None:
            return pipeline_view(session, existing)
        project = open_project(session, plan.project)
        row = Pipeline(id=new_id(), submission_id=submission, project=project.name, plan=document,
                       stages=[{"name": s.name, "type": s.type, "jobKind": None, "jobId": None, "attempt": 0,
                                "seen": None, "gate": None} for s in stages],
                       phase=PipelinePhase.PENDING.value, created_by=token[1][:64] if token else None,
                       created_at=utcnow())
        session.add(row)
        session.flush()
        record(session, PIPELINE.subject(row.id), "phase", phase=row.phase)
        queue_wake(session)
        return pipeline_view(session, row)


def _check_now(deployment: Deployment, project: str, stage: Stage, show_resolved: bool) -> dict[str, Any]:
    """What can be checked before anything starts: a stage that names no earlier stage is checked as its kind checks
    a submission (a train stage's run by its dry run); one that does is checked when it starts."""
    said: dict[str, Any] = {"name": stage.name, "type": stage.type,
                            "reads": {path: f"@{name}" for path, name in stage.reads.items()}}
    try:
        if stage.type == "train":
            deployment.catalog.find(stage.document["baseModel"])  # an unknown base model is refused now
            if stage.reads or stage.mix is not None:
                _check_run_plan(project, stage)
            if stage.mix is not None:
                return {**said, **_check_mix(deployment, project, stage)}
            if stage.reads:
                return {**said, "checked": "its run plan's own fields (the rest when it starts: it reads an earlier "
                                           "stage's output)"}
            dry = runs.dry_run(deployment, run_document(project, stage, {}))
            said |= {"checked": "its run's dry run", "configHash": dry.config_hash,
                     "model": f"{dry.project}/{dry.model_name}", "warnings": dry.warnings}
            return {**said, "resolved": dry.resolved} if show_resolved else said
        with deployment.store.transaction() as session:
            if stage.type == "evaluate":
                if "model" not in stage.reads:
                    resolve_model(deployment, session, stage.document["model"])
                if "dataset" not in stage.reads:
                    pick_chat_dataset(session, stage.document["dataset"], project.lower(), "dataset")
            elif stage.type == "curate":
                _curation_request(stage, project, {}, None)  # its fields, in the curation's own words
                if "judge" not in stage.reads and not str(stage.document["judge"]).startswith(
                        curations.ENDPOINT_PREFIX):  # a served judge is asked for when the stage starts
                    resolve_model(deployment, session, stage.document["judge"])
                _open_target(session, stage.document["dataset"], project)
            else:
                _distillation_request(stage, project, {stage.reads[p]: f"@{stage.reads[p]}" for p in stage.reads},
                                      None)  # its fields, in the distillation's own words
                if "teacher" not in stage.reads:
                    resolve_model(deployment, session, stage.document["teacher"])
                if "from" not in stage.reads:
                    refuse_images(pick_chat_dataset(session, stage.document["from"], project.lower(), "from"), "from",
                                  "and a distillation's teacher answers text rows only")
                _open_target(session, stage.document["to"], project)
        if stage.type == "evaluate" and "grader" not in stage.reads:
            evaluations.check_grader(stage.document.get("grader"))
        return {**said, "checked": "its references" + (" (the rest when it starts)" if stage.reads else "")}
    except PlatformError as error:
        raise type(error)(f"stage {stage.name}: {error.message}", hint=error.hint) from None


def _check_run_plan(project: str, stage: Stage) -> None:
    """A train stage that reads an earlier stage's output, read as its run plan with each `@STAGE` left in place:
    its fields, and the rules that need no reference resolved (a run from source.model states no LoRA)."""
    plan = parse_plan(run_document(project, stage, {name: f"@{name}" for name in stage.reads.values()},
                                   mixed=f"@{stage.name}" if stage.mix is not None else None))
    if "source.model" in stage.reads:
        refuse_stated_lora(plan, f"@{stage.reads['source.model']}")


def _check_mix(deployment: Deployment, project: str, stage: Stage) -> dict[str, Any]:
    """A mixing train stage: the registered datasets it lists and the namespace its mix registers into, now; its
    run once the mix is registered, when it starts."""
    with deployment.store.transaction() as session:
        for index, part in enumerate(stage.mix or []):
            if f"config.dataset[{index}]" not in stage.reads:
                mixable(session, part, project.lower(), index)
        _open_target(session, stage.document["mixedDataset"], project)
    return {"checked": "its datasets and where they mix (its run when it starts, over the mixed version)",
            "mixedDataset": mix_target(stage.document["mixedDataset"], project.lower())}


def _open_target(session, target: str, project: str) -> None:
    """A stage that registers a dataset version (curate, distill, a train stage's mix) is refused now when its
    namespace takes none."""
    namespace = target.split("/", 1)[0].lower() if "/" in target else project.lower()
    refuse_if_archived(session, namespace)


def run_document(project: str, stage: Stage, outputs: dict[str, str], submission: str | None = None,
                 mixed: str | None = None) -> dict[str, Any]:
    """The run plan of a train stage: the stage's run-plan content in the pipeline's project, each `@STAGE` replaced
    by that stage's output, and a mixing stage's listed datasets by the version they registered as (`mixed`)."""
    d = stage.document
    document: dict[str, Any] = {"kind": "run", "project": project, "baseModel": d["baseModel"],
                                "config": _substituted(d["config"], "config", stage, outputs)}
    if mixed is not None:
        document["config"]["dataset"] = mixed
    for key in ("modelName", "execution", "description", "configName"):
        if d.get(key) is not None:
            document[key] = copy.deepcopy(d[key])
    if d.get("source") is not None:
        document["source"] = _substituted(d["source"], "source", stage, outputs)
    if submission:
        document["submissionId"] = submission
    return document


def _substituted(value: Any, path: str, stage: Stage, outputs: dict[str, str]) -> Any:
    if isinstance(value, dict):
        return {k: _substituted(v, f"{path}.{k}", stage, outputs) for k, v in value.items()}
    return outputs[stage.reads[path]] if path in stage.reads else copy.deepcopy(value)


# --- read --------------------------------------------------------------------------------------------------


def find_pipeline(session, pipeline_id: str) -> Pipeline:
    return find_by_id_prefix(session, Pipeline, pipeline_id, "pipeline",
                             "list pipelines with: akka training pipelines list", visible_projects(Pipeline.project))


def get(deployment: Deployment, pipeline_id: str) -> answers.Pipeline:
    with deployment.store.transaction() as session:
        return pipeline_view(session, find_pipeline(session, pipeline_id))


def list_pipelines(deployment: Deployment, project: str | None, phase: str | None) -> answers.PipelineList:
    query = select(Pipeline).order_by(Pipeline.created_at.desc())
    visible = visible_projects(Pipeline.project)
    if visible is not None:
        query = query.where(visible)
    if project:
        query = query.where(Pipeline.project == project.lower())
    if phase:
        query = query.where(Pipeline.phase.in_(phases_asked(PIPELINE, phase, {"open": OPEN})))
    with deployment.store.transaction() as session:
        rows = session.scalars(query.limit(500))
        return answers.PipelineList(pipelines=[pipeline_view(session, row) for row in rows])


def pipeline_view(session, row: Pipeline) -> answers.Pipeline:
    _, stages = read_plan(row.plan)
    states = [_stage_view(session, row, stage, state) for stage, state in zip(stages, row.stages, strict=True)]
    return answers.Pipeline(
        pipeline_id=row.id, project=row.project, phase=row.phase, stages=states,
        count=count_of("pipeline", row.phase, {"completed": sum(s.state == "completed" for s in states),
                                               "total": len(states)}),
        device_seconds=round(sum(s.device_seconds or 0 for s in states), 1), description=row.plan.get("description"),
        failure_reason=row.failure_reason, created_by=row.created_by, created_at=iso(row.created_at),
        finished_at=iso(row.finished_at), terminal=row.phase in TERMINAL, settled=row.phase in TERMINAL)


def _stage_view(session, row: Pipeline, stage: Stage, state: dict[str, Any]) -> answers.StageState:
    job = _job(session, state)
    phase = job.phase if job is not None else None
    gate = stage.document.get("minMeanScore") if stage.type == "evaluate" else None
    if job is None:
        shown = "skipped" if row.phase in TERMINAL else "waiting"
    else:
        kind = job_kinds.kind(state["jobKind"])
        ended = kind.lifecycle.phase_of(job)
        shown = ("completed" if ended == kind.completed_phase() else ended.value.lower()
                 if ended in kind.lifecycle.terminal else "running")
    mean = (job.report or {}).get("meanScore") if isinstance(job, Evaluation) and job.report else None
    return answers.StageState(
        name=stage.name, type=stage.type, state=shown, job_kind=state["jobKind"], job_id=state["jobId"],
        job_phase=phase, attempt=state["attempt"], output=_output(session, job), mean_score=mean,
        min_mean_score=gate, device_seconds=_device_seconds(session, state, job),
        reason=state.get("gate") or (getattr(job, "failure_reason", None) if shown in ("failed", "cancelled")
                                     else None))


def _job(session, state: dict[str, Any]) -> Any:
    if not state.get("jobId"):
        return None
    return session.get(job_kinds.kind(state["jobKind"]).lifecycle.table, state["jobId"])


def _output(session, job: Any) -> str | None:
    """What a completed stage gives the stages after it."""
    if isinstance(job, Run):
        return run_model(session, job) if job.phase == "COMPLETED" else None
    if isinstance(job, Distillation | Curation):
        return (job.registered or {}).get("reference")
    return None


def _device_seconds(session, state: dict[str, Any], job: Any) -> float | None:
    if job is None:
        return None
    if isinstance(job, Run):
        return (job.cost or {}).get("deviceSeconds")
    return round(device_seconds(session, state["jobKind"], [job.id]), 1)


# --- cancel and resume -------------------------------------------------------------------------------------


def cancel(deployment: Deployment, pipeline_id: str) -> answers.Pipeline:
    """Cancel the pipeline and the job of the stage running now."""
    def decide(session) -> tuple[str, list[dict[str, Any]]]:
        row = find_pipeline(session, pipeline_id)
        if row.phase in TERMINAL:
            if row.phase == PipelinePhase.CANCELLED:
                return row.id, []
            raise Refused(f"pipeline {row.id[:12]} is {row.phase}; there is nothing to cancel", phase=row.phase)
        moved(transition(session, PIPELINE, row, PipelinePhase.CANCELLED), f"pipeline {row.id[:12]}")
        return row.id, [s for s in row.stages if s.get("jobId")]

    found, started = decided(deployment.store, decide)
    for state in started:
        try:
            _cancel_job(deployment, state["jobKind"], state["jobId"])
        except (Refused, Conflict):
            pass  # it had ended: nothing to stop
    return get(deployment, found)


def _cancel_job(deployment: Deployment, kind: str, job_id: str) -> None:
    if kind == "run":
        run_lifecycle.cancel(deployment, job_id)
    elif kind == "evaluation":
        evaluations.cancel(deployment, job_id)
    elif kind == "curation":
        curations.cancel(deployment, job_id, by_pipeline=True)
    else:
        distillations.cancel(deployment, job_id)


def resume(deployment: Deployment, pipeline_id: str) -> answers.Pipeline:
    """Start the stage that failed again, as a new job, and go on; the stages that completed are kept."""
    def decide(session) -> answers.Pipeline:
        row = find_pipeline(session, pipeline_id)
        if row.phase != PipelinePhase.FAILED:
            raise Conflict(f"pipeline {row.id[:12]} is {row.phase}; only a failed pipeline resumes",
                           hint=f"follow it with: akka training pipelines wait {row.id[:12]}")
        if any(s.get("gate") for s in row.stages):
            raise Refused(f"pipeline {row.id[:12]} was stopped by its gate: {row.failure_reason}",
                          hint="a gate's verdict stands; start a new pipeline with what should change")
        stages = copy.deepcopy(row.stages)
        for state in stages:
            job = _job(session, state)
            if job is None:
                continue
            kind = job_kinds.kind(state["jobKind"])
            if kind.lifecycle.phase_of(job) != kind.completed_phase():  # the stage that failed: a new job
                state.update(jobId=None, jobKind=None, seen=None)
        moved(transition(session, PIPELINE, row, PipelinePhase.RUNNING, note="resumed", stages=stages,
                         failure_reason=None, finished_at=None), f"pipeline {row.id[:12]}")
        return pipeline_view(session, row)

    return decided(deployment.store, decide)


# --- the server's step: move a running pipeline on ---------------------------------------------------------


def advance(deployment: Deployment, pipeline_id: str) -> None:
    """Read each stage's job in order: a completed one gives its output (an evaluate stage's gate decides whether
    the pipeline goes on), a running one is waited for, a failed one ends the pipeline; the first stage not started
    is started. Run at every tick while the pipeline is RUNNING; every decision is made again from the jobs."""
    with deployment.store.transaction() as session:
        row = session.get(Pipeline, pipeline_id)
        if row is None or row.phase != PipelinePhase.RUNNING:
            return
        _, stages = read_plan(row.plan)
        states = copy.deepcopy(row.stages)
    outputs: dict[str, str] = {}
    for index, (stage, state) in enumerate(zip(stages, states, strict=True)):
        if state["jobId"] is None:
            _start_stage(deployment, pipeline_id, index, stage, state["attempt"] + 1, outputs)
            return
        with deployment.store.transaction() as session:
            job = _job(session, state)
            kind = job_kinds.kind(state["jobKind"])
            phase = kind.lifecycle.phase_of(job) if job is not None else None
            if phase is not None and phase.value != state.get("seen"):
                _note_phase(session, pipeline_id, index, stage.name, phase.value)
            if phase == kind.completed_phase():
                failed_gate = _gate(stage, job)
                if failed_gate:
                    _end(session, pipeline_id, PipelinePhase.FAILED, failed_gate, gate_index=index)
                    return
                output = _output(session, job)
                if output:
                    outputs[stage.name] = output
                continue
            if job is None or phase in kind.lifecycle.terminal:
                why = (f": {job.failure_reason}" if getattr(job, "failure_reason", None) else "") if job else ""
                said = (f"{state['jobKind']} {state['jobId'][:12]} ended {phase.value}{why}" if job is not None
                        else f"its {state['jobKind']} {state['jobId'][:12]} no longer exists")
                _end(session, pipeline_id, PipelinePhase.FAILED, f"stage {stage.name}: {said}")
            return
    with deployment.store.transaction() as session:
        _end(session, pipeline_id, PipelinePhase.COMPLETED, None)


def _gate(stage: Stage, job: Any) -> str | None:
    """Why an evaluate stage's gate stops the pipeline, or None."""
    least = stage.document.get("minMeanScore") if stage.type == "evaluate" else None
    if least is None:
        return None
    mean = (job.report or {}).get("meanScore")
    if mean is not None and mean >= least:
        return None
    shown = "no score (its grader scored no answer)" if mean is None else f"mean score {mean:.4g}"
    return (f"stage {stage.name}: {shown} is below its minMeanScore {least:g}; the stages after it were not "
            "started")


def _start_stage(deployment: Deployment, pipeline_id: str, index: int, stage: Stage, attempt: int,
                 outputs: dict[str, str]) -> None:
    """Start a stage's job with the outputs it names; a refusal (its kind checks it now) ends the pipeline FAILED
    naming the stage."""
    with deployment.store.transaction() as session:
        row = session.get(Pipeline, pipeline_id)
        project = row.project
    try:
        if stage.type == "train":
            mixed = None
            if stage.mix is not None:
                parts = [_named(stage, f"config.dataset[{i}]", outputs, part) for i, part in enumerate(stage.mix)]
                mixed = register_mix(deployment, project, pipeline_id, stage.name, parts,
                                     stage.document["mixedDataset"])
            run, _ = runs.submit(deployment, run_document(project, stage, outputs, f"{pipeline_id}-{stage.name}-"
                                                                                   f"{attempt}", mixed),
                                 pipeline={"pipelineId": pipeline_id, "stage": stage.name})
            _started(deployment, pipeline_id, index, stage, "run", run.run_id, attempt)
        elif stage.type == "evaluate":
            request = _evaluation_request(stage, project, outputs)
            grader = evaluations.prepare_grader(deployment, request)
            with deployment.store.transaction() as session:  # the evaluation and its stage's record together
                evaluation = evaluations.insert(deployment, session, request, grader)
                _record_start(session, pipeline_id, index, stage, "evaluation", evaluation.id, attempt)
        elif stage.type == "curate":
            created, _ = curations.apply(deployment, _curation_request(stage, project, outputs,
                                                                       f"{pipeline_id}-{stage.name}-{attempt}"))
            _started(deployment, pipeline_id, index, stage, "curation", created.curation_id, attempt)
        else:
            created = distillations.create(deployment, _distillation_request(
                stage, project, outputs, f"{pipeline_id}-{stage.name}-{attempt}"))
            _started(deployment, pipeline_id, index, stage, "distillation", created.distillation_id, attempt)
    except PlatformError as error:  # a refusal of its kind, in its words
        with deployment.store.transaction() as session:
            hint = f" ({error.hint})" if error.hint else ""
            _end(session, pipeline_id, PipelinePhase.FAILED, f"stage {stage.name} could not start: {error.message}"
                                                              f"{hint}")


def _curation_request(stage: Stage, project: str, outputs: dict[str, str], key: str | None) -> CurationRequest:
    """A curate stage's curation, in the pipeline's project; its curationId makes a step taken again reach the same
    curation."""
    body = {k: v for k, v in stage.document.items() if k not in ("name", "type")}
    body |= {"project": project, "judge": outputs.get(stage.reads.get("judge", ""), stage.slot("judge"))}
    if key:
        body["curationId"] = key
    return CurationRequest.parse(body)


def _distillation_request(stage: Stage, project: str, outputs: dict[str, str], key: str | None
                          ) -> DistillationRequest:
    """A distill stage's distillation, in the pipeline's project (`from` its source, `to` its target); its
    submissionId makes a step taken again reach the same distillation."""
    body = {k: v for k, v in stage.document.items() if k not in ("name", "type", "from", "to")}
    body |= {"teacher": _named(stage, "teacher", outputs, stage.slot("teacher")),
             "source": _named(stage, "from", outputs, stage.slot("from")), "target": stage.slot("to"),
             "project": project}
    if key:
        body["submissionId"] = key
    return DistillationRequest.parse(body)


def _named(stage: Stage, path: str, outputs: dict[str, str], written: Any = None) -> Any:
    """What the stage names at `path`: the output of the stage it names, or the value as written."""
    if path in stage.reads:
        return outputs[stage.reads[path]]
    return written if written is not None else stage.slot(path)


def _evaluation_request(stage: Stage, project: str, outputs: dict[str, str]) -> EvaluationRequest:
    grader = stage.document.get("grader")
    if "grader" in stage.reads:
        grader = f"model:{outputs[stage.reads['grader']]}"
    return EvaluationRequest.parse({
        "model": _named(stage, "model", outputs), "dataset": _named(stage, "dataset", outputs), "project": project,
        "grader": grader, "graderInstructions": stage.document.get("graderInstructions"),
        "maxNewTokens": stage.document.get("maxNewTokens"), "deviceProfile": stage.document.get("deviceProfile")})


def _started(deployment: Deployment, pipeline_id: str, index: int, stage: Stage, kind: str, job_id: str,
             attempt: int) -> None:
    with deployment.store.transaction() as session:
        _record_start(session, pipeline_id, index, stage, kind, job_id, attempt)


def _record_start(session, pipeline_id: str, index: int, stage: Stage, kind: str, job_id: str, attempt: int) -> None:
    row = session.get(Pipeline, pipeline_id, with_for_update=True)
    stages = copy.deepcopy(row.stages)
    if stages[index]["jobId"] is not None:
        return  # recorded by a step before this one (a run's submissionId reached the same run)
    stages[index].update(jobKind=kind, jobId=job_id, attempt=attempt, seen=None)
    row.stages = stages
    record(session, PIPELINE.subject(pipeline_id), "stage", stage=stage.name, state="started", jobKind=kind,
           jobId=job_id)


def _note_phase(session, pipeline_id: str, index: int, name: str, phase: str) -> None:
    """A stage's job moved: its pipeline's followers are told (its state is read from the job itself)."""
    row = session.get(Pipeline, pipeline_id, with_for_update=True)
    stages = copy.deepcopy(row.stages)
    stages[index]["seen"] = phase
    row.stages = stages
    record(session, PIPELINE.subject(pipeline_id), "stage", stage=name, phase=phase)


def _end(session, pipeline_id: str, phase: PipelinePhase, reason: str | None, gate_index: int | None = None) -> None:
    row = session.get(Pipeline, pipeline_id)
    stages = copy.deepcopy(row.stages)
    if gate_index is not None:
        stages[gate_index]["gate"] = reason
    # lost: a user cancelled it meanwhile, and the next tick finds it no longer RUNNING
    moved(transition(session, PIPELINE, row, phase, failure_reason=reason, stages=stages),
          f"pipeline {pipeline_id[:12]}")
