"""A snapshot's weights (an adapter, or a full fine-tune's every weight) registered as `<project>/<modelName>:vN`,
with the base model, the datasets and the run in its lineage: when a run completes (its final snapshot, in the same
transaction that completes the run), and when a user registers any snapshot that still holds its weights. The same
weights register as the same version."""

from __future__ import annotations

from sqlalchemy import select

from optimize.core.errors import Invalid
from optimize.deployment import Deployment
from optimize.jobs.leases import reported
from optimize.jobs.lifecycle import transition
from optimize.registry.models import base_model_reference, register_version
from optimize.schemas.outcomes import RunLastWord
from optimize.schemas.resolved import resolved_config
from optimize.store.tables import Run, RunAttempt, RunMetric, Snapshot
from optimize.training.server.attempts import end_attempt
from optimize.training.server.phases import RUN, RunPhase


def register_adapter(deployment: Deployment, session, run: Run, snapshot: Snapshot, modules: list[str],
                     weights_digest: str | None, name: str | None = None) -> str:
    """Register the snapshot's weights as a version of the project's model; returns its reference. An adapter
    (lora, qlora) registers as an ADAPTER version over the base model, a full fine-tune's every weight as a
    WEIGHTS version of it."""
    weights = next((a for a in snapshot.artifacts if a["kind"] == "weights"), None)
    if weights is None:
        raise Invalid(f"snapshot {snapshot.id[:12]} holds no weights")
    entry = deployment.catalog.find(run.base_entry_id)
    config = resolved_config(run.resolved["config"])
    variant = "WEIGHTS" if config.model.trains == "full" else "ADAPTER"
    lora = config.trained_with.lora
    adapter = {"adapterRank": lora.rank, "adapterAlpha": lora.alpha, "modules": modules} if variant == "ADAPTER" else \
        {"trained": "full"}
    descriptor = {
        "variant": variant,
        "baseModel": base_model_reference(session, entry.repository, run.base_commit),
        "baseRepository": entry.repository,
        "baseCommit": run.base_commit,
        **adapter,
        "artifact": {"kind": "weights", "manifestDigest": weights["manifestDigest"],
                     "location": f"blob://{weights['manifestDigest'].replace(':', '/')}"},
        "weightsDigest": weights_digest,
    }
    datasets = [{"reference": run.dataset_reference, "digest": run.dataset_digest, "role": "training"}]
    if run.validation_reference:
        datasets.append({"reference": run.validation_reference, "digest": run.validation_digest, "role": "validation"})
    lineage = {"baseModel": descriptor["baseModel"], "datasets": datasets,
               "producedBy": {"kind": "run", "id": run.id, "snapshotId": snapshot.id, "step": snapshot.step}}
    model_name = name or run.model_name
    version = register_version(session, run.project, model_name, variant=variant, descriptor=descriptor,
                               lineage=lineage, produced_by_kind="run", produced_by_id=run.id).version
    reference = f"{run.project}/{model_name}:v{version.version}"
    snapshot.registered = sorted({*(snapshot.registered or []), reference})
    return reference


def complete_run(deployment: Deployment, session, run: Run, attempt: RunAttempt, word: RunLastWord) -> None:
    final = session.scalar(select(Snapshot).where(Snapshot.run_id == run.id, Snapshot.attempt == attempt.number)
                           .order_by(Snapshot.step.desc()).limit(1))
    if final is None or not any(a["kind"] == "weights" for a in final.artifacts):
        raise Invalid("a run completes only once its final save, with its weights, is committed")
    reference = register_adapter(deployment, session, run, final, word.modules or [], word.weights_digest)
    cost = {**(run.cost or {}), **(word.cost or {})}
    results = {**(run.results or {}), **(word.results or {})}
    losses = session.scalars(select(RunMetric).where(RunMetric.run_id == run.id, RunMetric.kind == "train")
                             .order_by(RunMetric.step)).all()
    losses = [m.values["loss"] for m in losses if m.values.get("loss") is not None]
    if losses:  # every update the run kept, over all its attempts (a resumed attempt reports only its own)
        results["trainingLoss"] = {"start": losses[0], "end": losses[-1], "mean": sum(losses) / len(losses)}
    end_attempt(session, run, attempt, "completed", by_worker=True)
    cost["deviceSeconds"] = run.cost["deviceSeconds"]
    # a run cancelled meanwhile is not completed: its adapter's registration rolls back with the refusal
    reported(transition(session, RUN, run, RunPhase.COMPLETED, by_worker=True, model_reference=reference,
                        results=results, cost=cost), RUN, run.id)


def run_model(session, run: Run) -> str | None:
    """The model version a completed run registered from its last save (`<project>/<modelName>:vN`), or None."""
    saves = session.scalars(select(Snapshot).where(Snapshot.run_id == run.id)
                            .order_by(Snapshot.attempt.desc(), Snapshot.step.desc())).all()
    last = next((save for save in saves if save.registered), None)
    registered = last.registered if last is not None else []
    own = [reference for reference in registered if reference.startswith(f"{run.project}/{run.model_name}:")]
    return (own or registered or [None])[0]
