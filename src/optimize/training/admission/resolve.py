"""Admission: a valid plan becomes a frozen run record, its resolved plan (`schemas.resolved.ResolvedPlan`, one
model per method) made here once.

References are resolved here and the exact versions recorded, so moving an alias later changes no accepted
run. Every config and execution value is resolved (defaults filled in by the profile the run asks for, and the
default kernels by model type) and its source kept: `stated` when the plan gave it, `default` or
`defaultKernels` otherwise. The configuration hash covers the base model commit and the resolved config, not
execution. What differs by training method (its dataset kind, its refusals, its defaults, the resolved model it
makes) is the method's own, in `training.methods`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from optimize.catalog.schema import Entry
from optimize.core.errors import Invalid, NotFound, Refused
from optimize.core.names import check_name
from optimize.core.paths import lookup
from optimize.core.refs import parse_reference
from optimize.jobs.devices import DeviceProfile
from optimize.registry.bundles import resolve_bundle
from optimize.registry.models import find_model, resolve_model_reference
from optimize.schemas.plans import RunConfig, RunPlan, Validation
from optimize.schemas.resolved import (
    ResolvedConfig,
    ResolvedModelSettings,
    ResolvedPlan,
    ResolvedReward,
    ResolvedTerm,
)
from optimize.store.tables import BaseModelSelection
from optimize.training.admission.envelopes import check_envelopes
from optimize.training.admission.images import check_images
from optimize.training.admission.kernels import default_kernels
from optimize.training.admission.memory import (
    Workload,
    calibration_for,
    estimate,
    resolve_checkpointing,
    resolve_sharding,
    shape_of,
    with_generation,
    workload_of,
)
from optimize.training.admission.prepared import check_prepared
from optimize.training.methods import HOLDS, declared, method_for, reader_of
from optimize.workloads.datasets import DatasetPick, find_dataset, pick_chat_dataset


@dataclass
class Admitted:
    entry: Entry
    commit: str
    dataset: DatasetPick
    validation: DatasetPick | None
    model_name: str
    resolved: ResolvedPlan
    sources: dict[str, str]  # each resolved leaf's path -> stated, default, defaultKernels or memoryEstimate
    config_hash: str
    device_count: int
    warnings: list[str]
    memory: dict[str, Any]  # the predicted peak per device (`admission.memory`), and why checkpointing is what it is


def admit(session: Session, plan: RunPlan, document: dict[str, Any], entry: Entry,
          selection: BaseModelSelection | None, profiles: list[DeviceProfile], strict_envelopes: bool = False
          ) -> Admitted:
    """Resolve and check everything a submission can know without reading rows."""
    if entry.serving_only:
        raise Refused(f"base model {entry.id} is allowed for serving only and cannot train",
                      hint="choose a base model whose Allowed for line says training (akka training base-models list)")
    config = plan.config
    if selection is None:
        raise Refused(f"base model {entry.id} is not selected on this deployment",
                      hint=f"select it first: akka training base-models select {entry.id}")
    if entry.context_length and config.max_seq_length > entry.context_length:
        raise Invalid(f"config.maxSeqLength {config.max_seq_length} is beyond the {entry.context_length}-token "
                      f"context of {entry.id}", hint=f"set config.maxSeqLength to at most {entry.context_length}")
    # the method's rules in the order a plan meets them: its datasets (even while the method is not trained, so a
    # plan learns everything that stands in its way), then whether it trains, then its own settings
    method = declared(config.method)
    dataset = pick_dataset(session, config.dataset, plan.project, "config.dataset", config.method)
    validation = (pick_dataset(session, config.validation.dataset, plan.project, "config.validation.dataset",
                               config.method)
                  if config.validation.dataset else None)
    method.admit_datasets([("config.dataset", dataset), ("config.validation.dataset", validation)])
    read = (("config.dataset", dataset), ("config.validation.dataset", validation))
    prepared = [(field, pick) for field, pick in read if pick and pick.prepared]
    if config.data.truncation == "right" and not config.loss.explicit_loss_mask_column and not prepared:
        raise Refused("data.truncation: right would cut the final answer, which the default loss selects for training",
                      hint="set data.truncation to error; to keep right, set loss.explicitLossMaskColumn and provide "
                           "masks that exclude every token past maxSeqLength")
    check_prepared(entry, selection.commit, selection.path, config, prepared)
    check_images(entry, config, method.engine, read)
    method = method_for(config.method)
    method.admit(config)
    if config.smoke is not None:
        method.admit_smoke(config)
    if config.hyperparams.lora.adapt_experts:  # never silently left out: the adapter would lack what was asked
        reason = "lora.adaptExperts is not trained on this deployment yet" if entry.adapt_experts else \
            f"base model {entry.id} has no expert weights that lora.adaptExperts could adapt"
        raise Refused(reason, hint="remove lora.adaptExperts or set it to false")
    model_name = check_name(plan.model_name or entry.repository.split("/")[-1], "modelName")
    profile = next((p for p in profiles if p.name == plan.execution.device_profile), None)
    on_cpu = plan.execution.device_profile == "cpu" or (profile is not None and profile.kind == "cpu")
    devices = max(1, plan.execution.gpus)
    method.admit_liger(config)
    if on_cpu and config.liger:
        raise Refused("liger kernels need a GPU; the cpu device profile cannot run them",
                      hint="remove config.liger, or set execution.deviceProfile to a GPU profile")
    precision = config.model.precision or ("fp32" if on_cpu else "bf16")
    adapter = trained_adapter(config, method, on_cpu, devices)
    if plan.execution.share_base:
        check_share_base(config, method, adapter, devices)
    # the default kernels apply where the plan leaves their setting out; they join the resolved config and its hash
    kernels = {path: value for path, value in default_kernels(entry, config.method, plan.execution.device_profile,
                                                              devices, on_gpu=not on_cpu).items()
               if lookup(document, f"config.{path}") is None}
    liger = {**config.liger, **{path.split(".", 1)[1]: on for path, on in kernels.items() if path.startswith("liger.")}}
    attention = config.model.attention_implementation or kernels.get("model.attentionImplementation") or "sdpa"
    if plan.execution.sharding is not None and devices == 1:
        raise Refused(f"execution.sharding {plan.execution.sharding} says how a run splits its work across several "
                      "devices; this run has one (execution.gpus 1)",
                      hint="remove execution.sharding, or set execution.gpus to 2 or more")
    memory, checkpointing, sharding = memory_plan(
        entry, workload_of(method, method.trained_with(config), config.max_seq_length, precision, liger, adapter,
                           on_cpu),
        config.model.gradient_checkpointing, plan.execution.sharding, devices, method.gradient_checkpointing(on_cpu),
        profile.memory_gib if profile is not None and not on_cpu else None, on_cpu)
    shared = {"dataset": dataset.reference, "seed": config.seed, "max_seq_length": config.max_seq_length,
              "model": ResolvedModelSettings(precision=precision, gradient_checkpointing=checkpointing,
                                             attention_implementation=attention, adapter=adapter),
              "liger": liger, "data": config.data, "loss": config.loss,
              "validation": Validation.model_validate({"dataset": validation.reference if validation else None}),
              "preference": config.preference, "smoke": config.smoke, "checks": config.checks,
              "packing": method.packing(config.packing, on_cpu, attention, any(pick.images for _, pick in read
                                                                                   if pick))}
    resolved_config, method_warnings = method.resolve(config, shared, on_cpu)  # e.g. a dpo run's loss
    if plan.execution.stop_when is not None:
        method.admit_stop_when(plan.execution.stop_when, resolved_config)
    check_pause_at_step(plan.execution.pause_at_step, resolved_config.loop.updates(dataset.rows, devices))
    resolved = ResolvedPlan(config=resolve_reward_terms(session, resolved_config),
                            execution=plan.execution.model_copy(update={"sharding": sharding}))
    stored = resolved.document()
    stated = set(_leaves(document.get("config") or {}, "config.")) | set(_leaves(document.get("execution") or {},
                                                                                   "execution."))
    sources = {path: ("stated" if path in stated else "defaultKernels" if path[len("config."):] in kernels
                      else "default") for path in _leaves(stored, "")}
    if memory.get("checkpointingReason") and "config.model.gradientCheckpointing" not in stated:
        sources["config.model.gradientCheckpointing"] = "memoryEstimate"
    if memory.get("shardingReason") and "execution.sharding" not in stated:
        sources["execution.sharding"] = "memoryEstimate"
    warnings = check_envelopes(entry, config.method, precision, plan.execution.device_profile, devices,
                               on_cpu, config.max_seq_length, strict_envelopes, adapter) + method_warnings
    digest_input = {"baseModel": f"{entry.id}@{selection.commit}", "config": stored["config"]}
    config_hash = hashlib.sha256(json.dumps(digest_input, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return Admitted(entry, selection.commit, dataset, validation, model_name, resolved, sources, config_hash, devices,
                    warnings, memory)


def trained_adapter(config: RunConfig, method, on_cpu: bool, devices: int) -> str:
    """`config.model.adapter` as the run trains it: a LoRA adapter unless the plan states another its method takes
    (`Method.adapters`). Every weight (full) or a LoRA adapter on a 4-bit base (qlora) train on one device; qlora
    needs a GPU and bitsandbytes."""
    adapter = config.model.adapter or "lora"
    if adapter == "lora":
        return adapter
    if adapter not in method.adapters:
        raise Refused(f"config.model.adapter: {adapter} trains supervised runs on this deployment; a {config.method} "
                      "run trains a LoRA adapter", hint="remove config.model.adapter, or set it to lora")
    if devices > 1:
        raise Refused(f"config.model.adapter: {adapter} trains on one device on this deployment; this run asks for "
                      f"{devices} (execution.gpus)", hint="set execution.gpus: 1, or config.model.adapter: lora")
    if adapter == "qlora" and on_cpu:
        raise Refused("config.model.adapter: qlora loads the base model quantized to 4 bits by bitsandbytes, which "
                      "needs a GPU; the cpu device profile cannot run it",
                      hint="set config.model.adapter to lora or full, or execution.deviceProfile to a GPU profile")
    if adapter == "qlora" and importlib.util.find_spec("bitsandbytes") is None:
        raise Refused("config.model.adapter: qlora quantizes the base model with bitsandbytes, which is not "
                      "installed on this deployment", hint="install the gpu extra (pip install 'optimize[gpu]'), "
                                                           "or set config.model.adapter to lora")
    if adapter == "full" and config.smoke is not None:
        raise Refused("config.smoke answers with the LoRA adapter its slice trained; config.model.adapter: full "
                      "trains every weight instead", hint="remove config.smoke, or set config.model.adapter to lora")
    return adapter


def check_share_base(config: RunConfig, method, adapter: str, devices: int) -> None:
    """`execution.shareBase` trains the run as one LoRA adapter among several on one loaded copy of the base, on
    one device, under a method whose trainer takes a model that already holds adapters."""
    if not method.shares_base:
        raise Refused(f"execution.shareBase trains supervised runs side by side on one loaded base; a {config.method} "
                      "run trains alone", hint="remove execution.shareBase, or set it to false")
    if adapter != "lora":
        raise Refused(f"execution.shareBase trains each run as a LoRA adapter of its own on one loaded base; "
                      f"config.model.adapter: {adapter} does not", hint="remove execution.shareBase, or set "
                                                                       "config.model.adapter to lora")
    if devices > 1:
        raise Refused(f"execution.shareBase trains runs side by side on one device; this run asks for {devices} "
                      "(execution.gpus)", hint="set execution.gpus: 1, or remove execution.shareBase")


def check_pause_at_step(pause_at: int | None, updates: int) -> None:
    """`execution.pauseAtStep` must fall before the run's last update: a run pauses after an update with more to
    train, so one at or after its last would never pause."""
    if pause_at is not None and pause_at >= updates:
        raise Refused(f"execution.pauseAtStep {pause_at} is at or after this run's last update: it makes {updates} "
                      f"update{'s' if updates != 1 else ''}, so it would never pause",
                      hint=f"set execution.pauseAtStep below {updates} (1 to {updates - 1}), or remove it"
                      if updates > 1 else "remove execution.pauseAtStep: a run of one update has no update to pause "
                                          "after")


def memory_plan(entry: Entry, workload: Workload, stated_checkpointing: bool | None, stated_sharding: str | None,
                devices: int, fixed: bool | None, device_gib: float | None, on_cpu: bool
                ) -> tuple[dict[str, Any], bool, str | None]:
    """Resolve `execution.sharding` on several devices where the plan leaves it out (ddp on the cpu; on a GPU the
    memory estimate's: fsdp only where a whole copy of the model does not fit one device), then
    `model.gradientCheckpointing` (the method's fixed choice, or on a GPU the estimate's: on only where the run
    would not fit without it), and predict the run's peak per device. Returns the memory record, checkpointing and
    sharding."""
    reason = sharding_reason = None
    shape = shape_of(entry)
    calibration = calibration_for(entry, shape, workload) if shape is not None else None
    sharding = stated_sharding
    if devices > 1 and sharding is None:
        if on_cpu:
            sharding = "ddp"
        else:
            sharding, sharding_reason = resolve_sharding(shape, workload, stated_checkpointing is not False,
                                                         device_gib, calibration, devices)
    shards = devices if sharding == "fsdp" else 1
    checkpointing = stated_checkpointing
    if checkpointing is None:
        if fixed is not None or on_cpu:
            checkpointing = bool(fixed)
        else:
            checkpointing, reason = resolve_checkpointing(shape, workload, device_gib, calibration, shards)
    if shape is None:
        return {"predicted": None, "checkpointingReason": reason, "shardingReason": sharding_reason,
                "basis": f"the catalog gives no shape (hiddenSize, layers, heads, kvHeads, vocab, parameters) for "
                         f"{entry.id}, so its peak is not estimated"}, checkpointing, sharding
    predicted = with_generation(estimate(shape, workload, checkpointing, calibration, shards), workload, device_gib)
    return {"predicted": predicted, "deviceMemoryGiB": device_gib, "checkpointingReason": reason,
            "shardingReason": sharding_reason,
            "basis": calibration.basis if calibration else "fitted to peaks measured on one H200"}, \
        checkpointing, sharding


def resolve_reward_terms(session: Session, config: ResolvedConfig) -> ResolvedConfig:
    """The config with its reward's terms resolved (`resolve_terms`); a config without a reward is returned as it is."""
    reward = config.reward
    if not isinstance(reward, ResolvedReward):
        return config
    return config.model_copy(update={"reward": reward.model_copy(update={"terms": resolve_terms(session,
                                                                                                reward.terms)})})


def resolve_terms(session: Session, terms: list[ResolvedTerm]) -> list[ResolvedTerm]:
    """Each rule term's scoring bundle resolved to its exact version (a moved alias changes no accepted run, and the
    version is in the configuration hash) and its archive's digest (the blob the worker downloads); each judge
    term's model resolved and frozen (`resolve_judge`)."""
    resolved = []
    for index, term in enumerate(terms):
        if term.kind == "rule":
            bundle, sha256 = resolve_bundle(session, term.bundle)
            term = term.model_copy(update={"bundle": bundle, "bundle_sha256": sha256})
        elif term.kind == "judge":
            term = term.model_copy(update=resolve_judge(session, term.model, f"config.reward.terms[{index}].model"))
        resolved.append(term)
    return resolved


JUDGE_HINT = ("select the base model first (akka training base-models select MODEL; list them: akka training "
              "base-models list), or name a registered model (list them: akka registry models list)")


def resolve_judge(session: Session, text: str, field: str) -> dict[str, Any]:
    """A judge term's model resolved and frozen, as an evaluation's judge is: `judge_reference` (the exact
    `NS/NAME:vN` of a registered model, or the base model's catalog id), `judge_base_entry_id` and
    `judge_base_commit` (the base model the worker loads, selected on this deployment), and `judge_manifest_digest`
    (an adapter's weights manifest, which the worker downloads; None for a base model). A model this deployment
    cannot load is refused naming the term's field."""
    version = None
    try:
        reference = parse_reference(text)
    except Invalid:
        reference = None
    if reference is not None and find_model(session, reference.namespace, reference.name) is not None:
        try:
            model, version = resolve_model_reference(session, reference)
        except (Invalid, NotFound) as error:
            raise NotFound(f"{field}: {error.message}", hint=error.hint or JUDGE_HINT) from None
    if version is not None and version.variant == "ADAPTER":
        descriptor = version.descriptor
        label = f"{model.namespace}/{model.name}:v{version.version}"
        selection = _selection(session, descriptor["baseRepository"])
        if selection is None:
            raise Refused(f"{field}: the judge {label} is an adapter over base model {descriptor['baseRepository']}, "
                          "which is not selected on this deployment",
                          hint=f"select it first: akka training base-models select {descriptor['baseRepository']}")
        return {"judge_reference": label, "judge_base_entry_id": selection.entry_id,
                "judge_base_commit": descriptor["baseCommit"],
                "judge_manifest_digest": descriptor["artifact"]["manifestDigest"]}
    if version is not None and version.variant != "BASE":
        raise Refused(f"{field}: {model.namespace}/{model.name}:v{version.version} holds {version.variant.lower()} "
                      "weights, which a judge cannot load", hint="name a base model or a trained adapter")
    wanted = version.descriptor.get("catalogEntry") if version is not None else text.split(":")[0]
    selection = _selection(session, wanted or text)
    if selection is None:
        raise NotFound(f"{field}: {text!r} is neither a base model selected on this deployment nor a registered "
                       "model", hint=JUDGE_HINT)
    return {"judge_reference": selection.entry_id, "judge_base_entry_id": selection.entry_id,
            "judge_base_commit": selection.commit, "judge_manifest_digest": None}


def _selection(session: Session, name: str) -> BaseModelSelection | None:
    """The base model selected on this deployment under a catalog id or a hub repository (any case)."""
    found = session.get(BaseModelSelection, name.strip())
    if found is not None:
        return found
    wanted = name.strip().lower()
    return session.scalar(select(BaseModelSelection).where(
        (func.lower(BaseModelSelection.entry_id) == wanted) | (func.lower(BaseModelSelection.repository) == wanted)
    ).limit(1))


def pick_dataset(session: Session, text: str, project: str, field: str, method: str | None) -> DatasetPick:
    """A dataset reference; one with no namespace resolves inside the project's namespace. `method` is the
    training method that reads it; None for an evaluation, which reads chat rows."""
    if method is None:
        return pick_chat_dataset(session, text, project, field)
    picked, kind = find_dataset(session, text, project, field)
    wanted = declared(method).dataset_kind
    if kind != wanted and not (kind == "prepared" and declared(method).prepared_rows):
        other = reader_of(kind)  # the method that would train what the dataset holds
        holds = HOLDS.get(kind, kind)
        raise Refused(f"{field} {picked.reference} holds {holds}; method {method} trains on {HOLDS[wanted]}",
                      hint=f"name a {wanted} dataset" + (f", or train it with method {other}" if other else ""))
    return picked


def _leaves(document: Any, prefix: str) -> list[str]:
    if isinstance(document, dict) and document:
        return [leaf for key, value in document.items() for leaf in _leaves(value, f"{prefix}{key}.")]
    return [prefix.rstrip(".")] if prefix else []
