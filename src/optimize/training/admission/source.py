"""Start from existing weights (`source.model`, reference §3.2): a run that trains a registered adapter instead of
a fresh one on the base model — a warm start, as a weights branch starts from its parent's save, but from a model
version of the registry.

Admission resolves the reference to its exact version, which must be an adapter over the run's base model at the
commit selected here, and records the start the way a weights branch does (`restore: weights` from the version's
weights manifest, at step 0), so the worker, the job's readable blobs and a resumed attempt treat it alike: the
run trains that adapter with a fresh optimizer and keeps its LoRA settings (stated LoRA settings are refused), and a
reinforcement run's KL reference is a frozen copy of it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from optimize.core.errors import NotFound, Refused
from optimize.registry.models import resolve_model_reference
from optimize.schemas.plans import RunPlan
from optimize.schemas.resolved import ResolvedPlan


def refuse_stated_lora(plan: RunPlan, reference: str) -> None:
    """A run from source.model trains that adapter and keeps its LoRA settings: a plan stating its own is refused
    (read from the plan alone, so a pipeline's train stage over an earlier stage's model is refused at submission)."""
    config = plan.config
    section, stated = ("rlHyperparams", config.rl_hyperparams) if "rl_hyperparams" in config.model_fields_set else \
        ("hyperparams", config.hyperparams)
    if stated is not None and "lora" in stated.model_fields_set:
        raise Refused(f"config.{section}.lora is stated, but a run from source.model {reference} trains that "
                      "adapter and keeps its LoRA settings", hint=f"remove config.{section}.lora")


def source_start(session: Session, plan: RunPlan, resolved: ResolvedPlan, entry, commit: str
                 ) -> tuple[dict[str, Any] | None, ResolvedPlan]:
    """The start record of a plan with `source.model` (None without one) and the resolved plan with its adapter's
    rank and alpha as its LoRA settings; refused naming `source.model` when the version cannot be trained on here."""
    if plan.source is None or not plan.source.model:
        return None, resolved
    text = plan.source.model
    try:
        model, version = resolve_model_reference(session, text)
    except NotFound as error:
        raise NotFound(f"source.model {text!r}: {error.message}", hint=error.hint) from None
    reference = f"{model.namespace}/{model.name}:v{version.version}"
    descriptor = version.descriptor or {}
    if version.variant != "ADAPTER":
        raise Refused(f"source.model {reference} is a {version.variant.lower()} model version; a run starts from a "
                      "trained adapter", hint="name an adapter version (akka registry models versions NS/NAME)")
    if descriptor.get("baseRepository") != entry.repository or descriptor.get("baseCommit") != commit:
        raise Refused(f"source.model {reference} is an adapter over {descriptor.get('baseRepository')} at "
                      f"{str(descriptor.get('baseCommit'))[:12]}, not over the run's base model {entry.id} at "
                      f"{commit[:12]}", hint=f"set baseModel to the adapter's base, or start from {entry.id} without "
                                             "source.model")
    refuse_stated_lora(plan, reference)
    if resolved.config.model.trains != "lora":
        raise Refused(f"source.model {reference} is a LoRA adapter the run would train on; config.model.adapter: "
                      f"{resolved.config.model.trains} trains another kind of weights",
                      hint="remove config.model.adapter, or source.model")
    lora = resolved.config.trained_with.lora
    lora = lora.model_copy(update={"rank": descriptor.get("adapterRank", lora.rank),
                                   "alpha": descriptor.get("adapterAlpha", lora.alpha)})
    resolved = resolved.model_copy(update={"config": resolved.config.with_trained(lora=lora)})
    return {"restore": "weights", "step": 0, "source": {"model": reference},
            "artifacts": [{"kind": "weights", "manifestDigest": descriptor["artifact"]["manifestDigest"]}],
            "parentRunId": None, "snapshotId": None, "requested": "weights",
            "why": f"starts from the weights of {reference}, with a fresh optimizer and its LoRA settings"}, resolved
