"""A completed run registers its final adapter as `<project>/<modelName>:vN`, with the base model, the datasets
and the run in its lineage, in the same transaction that completes the run."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from optimize.core.errors import Invalid
from optimize.deployment import Training
from optimize.registry.models import base_model_reference, register_version
from optimize.store.tables import Run, RunAttempt, Snapshot
from optimize.training.attempts import end_attempt
from optimize.training.phases import RunPhase, transition


def complete_run(training: Training, session, run: Run, attempt: RunAttempt, body: dict[str, Any]) -> None:
    final = session.scalar(select(Snapshot).where(Snapshot.run_id == run.id, Snapshot.attempt == attempt.number)
                           .order_by(Snapshot.step.desc()).limit(1))
    weights = next((a for a in final.artifacts if a["kind"] == "weights"), None) if final else None
    if weights is None:
        raise Invalid("a run completes only once its final save, with its adapter weights, is committed")
    entry = training.catalog.find(run.base_entry_id)
    lora = run.resolved["config"]["hyperparams"]["lora"]
    descriptor = {
        "variant": "ADAPTER",
        "baseModel": base_model_reference(session, entry.repository, run.base_commit),
        "baseRepository": entry.repository,
        "baseCommit": run.base_commit,
        "adapterRank": lora["rank"],
        "adapterAlpha": lora["alpha"],
        "modules": body.get("modules") or [],
        "artifact": {"kind": "weights", "manifestDigest": weights["manifestDigest"],
                     "location": f"blob://{weights['manifestDigest'].replace(':', '/')}"},
        "weightsDigest": body.get("weightsDigest"),
    }
    datasets = [{"reference": run.dataset_reference, "digest": run.dataset_digest, "role": "training"}]
    if run.validation_reference:
        datasets.append({"reference": run.validation_reference, "digest": run.validation_digest, "role": "validation"})
    lineage = {"baseModel": descriptor["baseModel"], "datasets": datasets,
               "producedBy": {"kind": "run", "id": run.id, "snapshotId": final.id, "step": final.step}}
    version = register_version(session, run.project, run.model_name, variant="ADAPTER", descriptor=descriptor,
                               lineage=lineage, produced_by_kind="run", produced_by_id=run.id)
    reference = f"{run.project}/{run.model_name}:v{version.version}"
    cost = {**(run.cost or {}), **(body.get("cost") or {})}
    results = {**(run.results or {}), **(body.get("results") or {})}
    end_attempt(session, run, attempt, "completed")
    cost["deviceSeconds"] = run.cost["deviceSeconds"]
    transition(session, run, RunPhase.COMPLETED, model_reference=reference, results=results, cost=cost)
