"""OpenAI's fine-tuning jobs as runs of the project: a job's request becomes a run plan (sft for `supervised`, dpo
for `dpo`; `n_epochs` (for "auto", OpenAI's rule: about 100 rows seen for a small file, 3 passes otherwise),
`batch_size`, the plan's default learning rate times `learning_rate_multiplier`, DPO's
`beta`, `seed`, and `suffix` as the registered model's name), submitted as any plan is, so admission checks it
before a device is claimed; every run of the project reads back as a job (`ftjob-<run id>`), its status from its
phase, its events from the run's recorded events and logged metrics, its checkpoints from its saves.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from optimize.catalog.schema import Entry
from optimize.core.clock import as_utc, unix_seconds
from optimize.core.environment import setting
from optimize.core.errors import Invalid, NotFound
from optimize.core.names import is_valid_name
from optimize.core.refs import fine_tuned_name, is_fine_tuned, without_fine_tuned
from optimize.deployment import Deployment
from optimize.fine_tuning.files import file_id, training_rows
from optimize.schemas import fine_tuning as shapes
from optimize.schemas.fine_tuning import FineTuningJobRequest
from optimize.schemas.phases import RunPhase
from optimize.schemas.plans import Hyperparams, RlHyperparams
from optimize.schemas.resolved import resolved_config
from optimize.store.tables import Event, Run, RunMetric, Snapshot
from optimize.training.server import lifecycle, runs
from optimize.training.server.phases import RUN
from optimize.workloads.models import resolve_model

PREFIX = "ftjob-"
STATUS = {RunPhase.QUEUED: "queued", RunPhase.PREPARING: "running", RunPhase.TRAINING: "running",
          RunPhase.PAUSING: "running", RunPhase.PAUSED: "paused", RunPhase.COMPLETED: "succeeded",
          RunPhase.FAILED: "failed", RunPhase.CANCELLED: "cancelled"}
METHODS = {"supervised": "sft", "dpo": "dpo"}
JOB_METHOD = {"sft": "supervised", "dpo": "dpo", "grpo": "reinforcement", "gspo": "reinforcement"}
DEFAULT_RATE = {"sft": Hyperparams().optimizer.learning_rate, "dpo": Hyperparams().optimizer.learning_rate,
                "grpo": RlHyperparams().optimizer.learning_rate, "gspo": RlHyperparams().optimizer.learning_rate}
_LIST_HINT = "GET /v1/fine_tuning/jobs lists the project's jobs"


def create(deployment: Deployment, project: str, request: FineTuningJobRequest) -> shapes.FineTuningJob:
    """Submit the job's run; refusals name the parameter they are about."""
    if request.metadata:
        raise Invalid("metadata is not kept by this server", hint="leave metadata out; a run's description is set "
                      "with: akka training runs annotate", param="metadata")
    if request.integrations:
        raise Invalid("integrations are not taken per job: this server forwards every run's metrics to the "
                      "trackers it is set up with", hint="leave integrations out", param="integrations")
    method, hyperparameters = _method(request)
    entry, source = _base_model(deployment, request.model)
    name = request.suffix.lower() if request.suffix is not None else None
    if name is not None and not is_valid_name(name):
        raise Invalid(f"suffix {request.suffix!r} is not a model name of the registry",
                      hint="use 1 to 64 letters and digits, separated by single '.', '_' or '-'", param="suffix")
    with deployment.store.transaction() as session:
        dataset, rows = training_rows(session, project, request.training_file, "training_file")
        validation = training_rows(session, project, request.validation_file, "validation_file")[0] \
            if request.validation_file else None
    plan = _plan(deployment, project, entry, method, hyperparameters, dataset, rows, validation, name, request.seed)
    if source is not None:  # a fine-tuned model trained on: its adapter, its LoRA settings kept
        plan["source"] = {"model": source}
    run, _created = runs.submit(deployment, plan)
    return get(deployment, project, PREFIX + run.run_id)


def get(deployment: Deployment, project: str, job_id: str) -> shapes.FineTuningJob:
    with deployment.store.transaction() as session:
        return job_view(_run(session, project, job_id))


def list_jobs(deployment: Deployment, project: str, after: str | None, limit: int
              ) -> shapes.FineTuningJobList:
    """The project's runs as jobs, newest first."""
    with deployment.store.transaction() as session:
        query = select(Run).where(Run.project == project).order_by(Run.created_at.desc(), Run.id.desc())
        if after:
            anchor = _run(session, project, after, "after")
            query = query.where((Run.created_at < anchor.created_at) | (
                (Run.created_at == anchor.created_at) & (Run.id < anchor.id)))
        found = session.scalars(query.limit(limit + 1)).all()
        return shapes.FineTuningJobList(object="list", data=[job_view(run) for run in found[:limit]],
                                        has_more=len(found) > limit)


def cancel(deployment: Deployment, project: str, job_id: str) -> shapes.FineTuningJob:
    lifecycle.cancel(deployment, _run_id(deployment, project, job_id))
    return get(deployment, project, job_id)


def pause(deployment: Deployment, project: str, job_id: str) -> shapes.FineTuningJob:
    """Paused at the run's next save, with its training state (resume goes on from there)."""
    lifecycle.pause(deployment, _run_id(deployment, project, job_id), "save")
    return get(deployment, project, job_id)


def resume(deployment: Deployment, project: str, job_id: str) -> shapes.FineTuningJob:
    lifecycle.resume(deployment, _run_id(deployment, project, job_id))
    return get(deployment, project, job_id)


def events(deployment: Deployment, project: str, job_id: str, after: str | None, limit: int
           ) -> shapes.JobEventList:
    """The run's recorded events and each logged step's figures, newest first."""
    with deployment.store.transaction() as session:
        run = _run(session, project, job_id)
        recorded = session.scalars(select(Event).where(Event.subject == RUN.subject(run.id))).all()
        metrics = session.scalars(select(RunMetric).where(RunMetric.run_id == run.id)).all()
        total = run.progress.get("totalSteps") if isinstance(run.progress, dict) else None
        items = [(as_utc(event.at), event.id, _message_event(event)) for event in recorded]
        items += [(as_utc(point.at), 0, _metrics_event(run, point, total)) for point in metrics]
    items.sort(key=lambda item: (item[0], item[1]), reverse=True)
    ordered = [event for *_order, event in items if event is not None]
    return shapes.JobEventList(object="list", **_page(ordered, after, limit, "event"))


def checkpoints(deployment: Deployment, project: str, job_id: str, after: str | None, limit: int
                ) -> shapes.JobCheckpointList:
    """The run's saves that hold adapter weights, newest first, with the figures logged at their steps."""
    with deployment.store.transaction() as session:
        run = _run(session, project, job_id)
        saves = session.scalars(select(Snapshot).where(Snapshot.run_id == run.id)
                                .order_by(Snapshot.committed_at.desc(), Snapshot.step.desc())).all()
        figures = {(point.kind, point.step): point.values for point in
                   session.scalars(select(RunMetric).where(RunMetric.run_id == run.id))}
        found = [_checkpoint(run, save, figures) for save in saves
                 if any(item["kind"] == "weights" for item in save.artifacts) and "weights" not in (save.swept or [])]
    page = _page(found, after, limit, "checkpoint")
    return shapes.JobCheckpointList(object="list", **page, first_id=page["data"][0].id if page["data"] else None,
                                    last_id=page["data"][-1].id if page["data"] else None)


def job_view(run: Run) -> shapes.FineTuningJob:
    config = resolved_config(run.resolved["config"])
    trained = config.trained_with
    beta = getattr(config.preference, "beta", None) if run.method == "dpo" else None
    hyperparameters = shapes.JobHyperparameters(
        n_epochs=trained.training.epochs, batch_size=trained.training.batch_size,
        learning_rate_multiplier=round(trained.optimizer.learning_rate / DEFAULT_RATE[run.method], 6), beta=beta)
    kind = JOB_METHOD[run.method]
    phase = RunPhase(run.phase)
    failed = phase == RunPhase.FAILED
    return shapes.FineTuningJob(
        id=PREFIX + run.id, object="fine_tuning.job", created_at=unix_seconds(run.created_at),
        error=shapes.JobError(code="run_failed", message=run.failure_reason or "the run failed", param=None)
        if failed else None,
        fine_tuned_model=fine_tuned_name(run.model_reference)
        if phase == RunPhase.COMPLETED and run.model_reference else None,
        finished_at=unix_seconds(run.finished_at) if run.finished_at else None, hyperparameters=hyperparameters,
        model=run.base_entry_id, organization_id=run.project, result_files=[], seed=config.seed,
        status=STATUS[phase], trained_tokens=None, training_file=file_id(run.dataset_digest),
        validation_file=file_id(run.validation_digest) if run.validation_digest else None, estimated_finish=None,
        integrations=None, metadata=None,
        method=shapes.JobMethod(type=kind, **{kind: shapes.JobMethodPart(hyperparameters=hyperparameters)}))


def _method(request: FineTuningJobRequest) -> tuple[str, shapes.Hyperparameters]:
    """The run's method and the hyperparameters asked for, from `method` or the older top-level spelling."""
    if request.method is None:
        return "sft", request.hyperparameters or shapes.Hyperparameters()
    if request.hyperparameters is not None:
        raise Invalid("hyperparameters and method were both given", hint="give the hyperparameters inside "
                      "method.supervised or method.dpo", param="hyperparameters")
    kind = request.method.type
    other = "dpo" if kind == "supervised" else "supervised"
    if getattr(request.method, other) is not None:
        raise Invalid(f"method.{other} was given for a method of type {kind}",
                      hint=f"give the hyperparameters in method.{kind}", param=f"method.{other}")
    part = getattr(request.method, kind)
    if part is not None:
        return METHODS[kind], part.hyperparameters
    return METHODS[kind], shapes.DpoHyperparameters() if kind == "dpo" else shapes.Hyperparameters()


def _base_model(deployment: Deployment, asked: str) -> tuple[Entry, str | None]:
    """The base model a job trains, and the fine-tuned model (`ft:NS/NAME:vN`) it goes on training, if it names
    one."""
    if is_fine_tuned(asked):
        with deployment.store.transaction() as session:
            try:
                reference, model, _owner = resolve_model(deployment, session, without_fine_tuned(asked))
            except (Invalid, NotFound) as error:
                raise NotFound(f"model {asked!r} is no fine-tuned model here: {error.message}",
                               hint="GET /v1/fine_tuning/jobs lists the jobs and the models they made",
                               param="model") from None
        if model["kind"] != "adapter":
            raise Invalid(f"model {asked!r} is a base model: name it without ft:", param="model")
        return deployment.catalog.find(model["baseEntryId"]), reference
    names = setting("OPTIMIZE_FINE_TUNING_MODELS") or {}
    wanted = names.get(asked, asked)
    try:
        return deployment.catalog.find(wanted), None
    except (Invalid, NotFound):
        stood = f" (OPTIMIZE_FINE_TUNING_MODELS maps it to {wanted!r})" if wanted != asked else ""
        raise NotFound(f"model {asked!r} is not a base model of this deployment{stood}",
                       hint="name a selected base model (akka training base-models list), or map the name in "
                            "OPTIMIZE_FINE_TUNING_MODELS", param="model") from None


def auto_epochs(rows: int) -> int:
    """OpenAI's rule for n_epochs "auto": 3 passes, more for a small file (about 100 rows seen in all, at most 25
    passes), fewer for a large one (about 25,000 rows seen, at least 1 pass)."""
    if rows * 3 < 100:
        return min(25, max(1, 100 // rows))
    if rows * 3 > 25_000:
        return max(1, 25_000 // rows)
    return 3


def _plan(deployment: Deployment, project: str, entry: Entry, method: str, asked: shapes.Hyperparameters,
          dataset: str, rows: int, validation: str | None, name: str | None, seed: int | None) -> dict[str, Any]:
    """The run plan a job is: what it asks for; for "auto", OpenAI's passes over a file of its size, and the plan's
    own defaults otherwise."""
    training: dict[str, Any] = {"epochs": auto_epochs(rows) if asked.n_epochs == "auto" else asked.n_epochs}
    if asked.batch_size != "auto":
        training["batchSize"] = asked.batch_size
    hyperparams: dict[str, Any] = {"training": training}
    if asked.learning_rate_multiplier != "auto":
        hyperparams["optimizer"] = {"learningRate": DEFAULT_RATE[method] * asked.learning_rate_multiplier}
    config: dict[str, Any] = {"dataset": dataset, "method": method, "hyperparams": hyperparams,
                              "maxSeqLength": min(2048, entry.context_length or 2048)}
    if isinstance(asked, shapes.DpoHyperparameters) and asked.beta != "auto":
        config["preference"] = {"beta": asked.beta}
    if validation:
        config["validation"] = {"dataset": validation}
    if seed is not None:
        config["seed"] = seed
    profiles = {profile.name for profile in deployment.profiles}
    profile = next((e.device_profile for e in entry.envelopes if e.method == method and e.device_profile in profiles),
                   "cpu")
    plan = {"kind": "run", "project": project, "baseModel": entry.id, "config": config,
            "execution": {"deviceProfile": profile}, "description": "an OpenAI fine-tuning job"}
    if name:
        plan["modelName"] = name
    return plan


def _run_id(deployment: Deployment, project: str, job_id: str) -> str:
    with deployment.store.transaction() as session:
        return _run(session, project, job_id).id


def _run(session, project: str, job_id: str, param: str = "fine_tuning_job_id") -> Run:
    run_id = job_id.removeprefix(PREFIX)
    run = session.get(Run, run_id) if job_id.startswith(PREFIX) else None
    if run is None or run.project != project:
        raise NotFound(f"no fine-tuning job {job_id!r} in project {project}", hint=_LIST_HINT, param=param)
    return run


def _message_event(event: Event) -> shapes.JobEvent | None:
    """A recorded event as OpenAI's job event (progress reports, which the metrics say better, are left out)."""
    data = event.data or {}
    if event.kind == "phase":
        phase = data.get("phase")
        message = {"QUEUED": "Job queued", "PREPARING": "Preparing the training rows", "TRAINING": "Training started",
                   "PAUSED": "Job paused", "COMPLETED": "The job has successfully completed",
                   "FAILED": f"Job failed: {data.get('reason') or 'the run failed'}",
                   "CANCELLED": "Job cancelled"}.get(phase, f"Job is {str(phase).lower()}")
        level = "error" if phase == "FAILED" else "info"
    elif event.kind == "snapshot":
        message, level = f"Checkpoint saved at step {data.get('step')}", "info"
    elif event.kind in ("guard-warning", "guard-stop"):
        message, level = f"Guard: {data.get('guard')}", "warn"
    else:
        return None
    return shapes.JobEvent(id=f"ftevent-{event.id}", object="fine_tuning.job.event", created_at=unix_seconds(event.at),
                           level=level, message=message, type="message", data=None)


def _metrics_event(run: Run, point: RunMetric, total: Any) -> shapes.JobEvent:
    figures = {key: value for key, value in (point.values or {}).items() if isinstance(value, int | float)}
    loss = figures.get("loss")
    what = "validation loss" if point.kind == "validation" else "training loss"
    shown = f", {what}={loss:.4f}" if isinstance(loss, int | float) else ""
    of = f"/{total}" if isinstance(total, int) else ""
    return shapes.JobEvent(id=f"ftevent-{run.id[:12]}-{point.kind}-{point.step}", object="fine_tuning.job.event",
                           created_at=unix_seconds(point.at), level="info", message=f"Step {point.step}{of}{shown}",
                           type="metrics", data={"step": point.step, "kind": point.kind, **figures})


def _checkpoint(run: Run, save: Snapshot, figures: dict[tuple[str, int], dict[str, Any]]) -> shapes.JobCheckpoint:
    train = figures.get(("train", save.step)) or {}
    valid = figures.get(("validation", save.step)) or {}
    registered = sorted(save.registered or [])
    return shapes.JobCheckpoint(
        id=f"ftckpt-{save.id}", object="fine_tuning.job.checkpoint", created_at=unix_seconds(save.committed_at),
        fine_tuned_model_checkpoint=fine_tuned_name(registered[-1]) if registered else save.id,
        fine_tuning_job_id=PREFIX + run.id,
        metrics=shapes.CheckpointMetrics(step=float(save.step), train_loss=train.get("loss"),
                                         valid_loss=valid.get("loss")),
        step_number=save.step)


def _page(items: list[Any], after: str | None, limit: int, what: str) -> dict[str, Any]:
    """A cursor page: `limit` items after the one `after` names."""
    start = 0
    if after:
        position = next((index for index, item in enumerate(items) if item.id == after), None)
        if position is None:
            raise NotFound(f"no {what} {after!r} in this job's list", hint="pass an id the list answered",
                           param="after")
        start = position + 1
    return {"data": items[start:start + limit], "has_more": start + limit < len(items)}
