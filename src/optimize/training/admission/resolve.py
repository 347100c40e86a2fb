"""Admission: a valid plan becomes a frozen run record.

References are resolved here and the exact versions recorded, so moving an alias later changes no accepted
run. Every config and execution value is resolved (defaults filled in by the profile the run asks for, and the
default kernels by model type) and its source kept: `stated` when the plan gave it, `default` or
`defaultKernels` otherwise. The configuration hash covers the base model commit and the resolved config, not
execution. What differs by training method (its dataset kind, its refusals, its defaults) is the method's own,
in `training.methods`.
"""

from __future__ import annotations

import hashlib
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
from optimize.registry.datasets import resolve_reference
from optimize.registry.models import find_model, resolve_model_reference
from optimize.schemas.plans import REINFORCEMENT, RunPlan, StopWhen
from optimize.store.tables import BaseModelSelection
from optimize.training.admission.envelopes import check_envelopes
from optimize.training.admission.kernels import default_kernels
from optimize.training.admission.memory import (
    calibration_for,
    estimate,
    resolve_checkpointing,
    resolve_sharding,
    shape_of,
)
from optimize.training.methods import HOLDS, declared, method_for, reader_of


@dataclass
class DatasetPick:
    reference: str
    digest: str
    rows: int
    tool_rows: int


@dataclass
class Admitted:
    entry: Entry
    commit: str
    dataset: DatasetPick
    validation: DatasetPick | None
    model_name: str
    resolved: dict[str, Any]
    sources: dict[str, str]
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
    if config.data.truncation == "right" and not config.loss.explicit_loss_mask_column:
        raise Refused("data.truncation: right would cut the final answer, which the default loss selects for training",
                      hint="set data.truncation to error; to keep right, set loss.explicitLossMaskColumn and provide "
                           "masks that exclude every token past maxSeqLength")
    # the method's rules in the order a plan meets them: its datasets (even while the method is not trained, so a
    # plan learns everything that stands in its way), then whether it trains, then its own settings
    method = declared(config.method)
    dataset = pick_dataset(session, config.dataset, plan.project, "config.dataset", config.method)
    validation = (pick_dataset(session, config.validation.dataset, plan.project, "config.validation.dataset",
                               config.method)
                  if config.validation.dataset else None)
    method.admit_datasets([("config.dataset", dataset), ("config.validation.dataset", validation)])
    method = method_for(config.method)
    method.admit(config)
    if config.smoke is not None:
        _admit_smoke(config)
    if config.hyperparams.lora.adapt_experts:  # never silently left out: the adapter would lack what was asked
        reason = "lora.adaptExperts is not trained on this deployment yet" if entry.adapt_experts else \
            f"base model {entry.id} has no expert weights that lora.adaptExperts could adapt"
        raise Refused(reason, hint="remove lora.adaptExperts or set it to false")
    model_name = check_name(plan.model_name or entry.repository.split("/")[-1], "modelName")
    profile = next((p for p in profiles if p.name == plan.execution.device_profile), None)
    on_cpu = plan.execution.device_profile == "cpu" or (profile is not None and profile.kind == "cpu")
    devices = max(1, plan.execution.gpus)
    if config.liger and config.method != "sft" and any(config.liger.values()):
        other = "preference.fusedLoss (Liger's fused DPO loss)" if config.method == "dpo" else "none"
        raise Refused(f"config.liger turns on Liger's kernels in supervised runs; a {config.method} run does not take "
                      f"them (its Liger setting: {other})", hint="remove config.liger")
    if config.method == "sft" and config.liger.get("fused_linear_cross_entropy"):
        raise Refused("config.liger.fused_linear_cross_entropy would replace the fused LM head TRL's supervised "
                      "trainer computes its loss with (in chunks: the full logits are never held)",
                      hint="remove config.liger.fused_linear_cross_entropy, or set it to false")
    if on_cpu and config.liger:
        raise Refused("liger kernels need a GPU; the cpu device profile cannot run them",
                      hint="remove config.liger, or set execution.deviceProfile to a GPU profile")
    resolved = {"config": config.model_dump(by_alias=True, mode="json"),
                "execution": plan.execution.model_dump(by_alias=True, mode="json")}
    resolved["config"]["dataset"] = dataset.reference
    resolved["config"]["validation"]["dataset"] = validation.reference if validation else None
    model = resolved["config"]["model"]
    if model["precision"] is None:
        model["precision"] = "fp32" if on_cpu else "bf16"
    method_warnings = method.resolve(resolved["config"], config, on_cpu)  # e.g. a dpo run's preference section
    if plan.execution.stop_when is not None:
        _admit_stop_when(plan.execution.stop_when, resolved["config"])
    resolve_reward_bundles(session, resolved["config"])
    resolve_reward_judges(session, resolved["config"])
    kernels = {path: value for path, value in default_kernels(entry, config.method, plan.execution.device_profile,
                                                              devices, on_gpu=not on_cpu).items()
               if lookup(document, f"config.{path}") is None}
    for path, value in kernels.items():
        _set(resolved["config"], path, value)
    if model["attentionImplementation"] is None:
        model["attentionImplementation"] = "sdpa"
    if plan.execution.sharding is not None and devices == 1:
        raise Refused(f"execution.sharding {plan.execution.sharding} says how a run splits its work across several "
                      "devices; this run has one (execution.gpus 1)",
                      hint="remove execution.sharding, or set execution.gpus to 2 or more")
    memory = memory_plan(entry, resolved["config"], resolved["execution"], devices,
                         method.gradient_checkpointing(on_cpu),
                         profile.memory_gib if profile is not None and not on_cpu else None, on_cpu)
    stated = set(_leaves(document.get("config") or {}, "config.")) | set(_leaves(document.get("execution") or {},
                                                                                   "execution."))
    sources = {path: ("stated" if path in stated else "defaultKernels" if path[len("config."):] in kernels
                      else "default") for path in _leaves(resolved, "")}
    if memory.get("checkpointingReason") and "config.model.gradientCheckpointing" not in stated:
        sources["config.model.gradientCheckpointing"] = "memoryEstimate"
    if memory.get("shardingReason") and "execution.sharding" not in stated:
        sources["execution.sharding"] = "memoryEstimate"
    warnings = check_envelopes(entry, config.method, model["precision"], plan.execution.device_profile, devices,
                               on_cpu, config.max_seq_length, strict_envelopes) + method_warnings
    digest_input = {"baseModel": f"{entry.id}@{selection.commit}", "config": resolved["config"]}
    config_hash = hashlib.sha256(json.dumps(digest_input, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return Admitted(entry, selection.commit, dataset, validation, model_name, resolved, sources, config_hash, devices,
                    warnings, memory)


def memory_plan(entry: Entry, config: dict[str, Any], execution: dict[str, Any], devices: int, fixed: bool | None,
                device_gib: float | None, on_cpu: bool) -> dict[str, Any]:
    """Resolve `execution.sharding` on several devices where the plan leaves it out (ddp on the cpu; on a GPU the
    memory estimate's: fsdp only where a whole copy of the model does not fit one device), then
    `model.gradientCheckpointing` (the method's fixed choice, or on a GPU the estimate's: on only where the run
    would not fit without it), and predict the run's peak per device."""
    model = config["model"]
    reason = sharding_reason = None
    shape = shape_of(entry)
    calibration = calibration_for(entry, shape, config) if shape is not None else None
    if devices > 1 and execution.get("sharding") is None:
        if on_cpu:
            execution["sharding"] = "ddp"
        else:
            execution["sharding"], sharding_reason = resolve_sharding(shape, config, device_gib, calibration, devices)
    shards = devices if execution.get("sharding") == "fsdp" else 1
    if model["gradientCheckpointing"] is None:
        if fixed is not None or on_cpu:
            model["gradientCheckpointing"] = bool(fixed)
        else:
            model["gradientCheckpointing"], reason = resolve_checkpointing(shape, config, device_gib, calibration,
                                                                           shards)
    if shape is None:
        return {"predicted": None, "checkpointingReason": reason, "shardingReason": sharding_reason,
                "basis": f"the catalog gives no shape (hiddenSize, layers, heads, kvHeads, vocab, parameters) for "
                         f"{entry.id}, so its peak is not estimated"}
    predicted = estimate(shape, config, bool(model["gradientCheckpointing"]), calibration, shards)
    return {"predicted": predicted, "deviceMemoryGiB": device_gib, "checkpointingReason": reason,
            "shardingReason": sharding_reason,
            "basis": calibration.basis if calibration else "fitted to peaks measured on one H200"}


def _admit_stop_when(stop_when: StopWhen, config: dict[str, Any]) -> None:
    """`execution.stopWhen` watches what only a reinforcement run reports: its reward, and its KL where it takes a
    KL penalty (TRL measures none without one)."""
    if config["method"] not in REINFORCEMENT:
        raise Refused(f"execution.stopWhen watches a reinforcement run's reward and KL, which a {config['method']} "
                      "run does not report", hint="remove execution.stopWhen, or train with method grpo or gspo")
    if stop_when.reward_drop_below is None and stop_when.kl_above is None:
        raise Invalid("execution.stopWhen names no bound",
                      hint="set execution.stopWhen.rewardDropBelow, klAbove or both, or remove execution.stopWhen")
    if stop_when.kl_above is not None and config["rlHyperparams"]["klBeta"] == 0:
        raise Refused("execution.stopWhen.klAbove watches the KL against the starting policy, which a run with "
                      "rlHyperparams.klBeta 0 does not measure",
                      hint="remove execution.stopWhen.klAbove, or set rlHyperparams.klBeta above 0")


def _admit_smoke(config) -> None:
    """A smoke check trains the first rows as they are: a dpo run has none, and no row may be left out or trimmed."""
    if config.method == "dpo":
        raise Refused("a dpo run takes no smoke check (it has no answers of its own to score)",
                      hint="remove config.smoke")
    if config.data.truncation not in ("error", "right"):
        raise Refused(f"data.truncation: {config.data.truncation} leaves out or trims rows, which a smoke check "
                      "trains as they are", hint="set data.truncation: error, or remove config.smoke")


def resolve_reward_bundles(session: Session, config: dict[str, Any]) -> None:
    """Each rule term's scoring bundle resolved to its exact version (a moved alias changes no accepted run, and the
    version is in the configuration hash) and its archive's digest (the blob the worker downloads)."""
    for term in (config.get("reward") or {}).get("terms") or []:
        if term["kind"] == "rule":
            term["bundle"], term["bundleSha256"] = resolve_bundle(session, term["bundle"])


JUDGE_HINT = ("select the base model first (akka training base-models select MODEL; list them: akka training "
              "base-models list), or name a registered model (list them: akka registry models list)")


def resolve_reward_judges(session: Session, config: dict[str, Any]) -> None:
    """Each judge term's model resolved and frozen, as an evaluation's judge is: `judgeReference` (the exact
    `NS/NAME:vN` of a registered model, or the base model's catalog id), `judgeBaseEntryId` and `judgeBaseCommit`
    (the base model the worker loads, selected on this deployment), and `judgeManifestDigest` (an adapter's weights
    manifest, which the worker downloads; None for a base model). A model this deployment cannot load is refused
    naming the term's field."""
    for index, term in enumerate((config.get("reward") or {}).get("terms") or []):
        if term["kind"] == "judge":
            term.update(_resolve_judge(session, term["model"], f"config.reward.terms[{index}].model"))


def _resolve_judge(session: Session, text: str, field: str) -> dict[str, Any]:
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
        return {"judgeReference": label, "judgeBaseEntryId": selection.entry_id,
                "judgeBaseCommit": descriptor["baseCommit"],
                "judgeManifestDigest": descriptor["artifact"]["manifestDigest"]}
    if version is not None and version.variant != "BASE":
        raise Refused(f"{field}: {model.namespace}/{model.name}:v{version.version} holds {version.variant.lower()} "
                      "weights, which a judge cannot load", hint="name a base model or a trained adapter")
    wanted = version.descriptor.get("catalogEntry") if version is not None else text.split(":")[0]
    selection = _selection(session, wanted or text)
    if selection is None:
        raise NotFound(f"{field}: {text!r} is neither a base model selected on this deployment nor a registered "
                       "model", hint=JUDGE_HINT)
    return {"judgeReference": selection.entry_id, "judgeBaseEntryId": selection.entry_id,
            "judgeBaseCommit": selection.commit, "judgeManifestDigest": None}


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
    qualified = text if "/" in text else f"{project}/{text}"
    try:
        reference = parse_reference(qualified)
    except Invalid as error:
        raise Invalid(f"{field}: {error.message}", hint=error.hint) from None
    found, version = resolve_reference(session, reference)
    label = f"{found.namespace}/{found.name}:v{version.version}"
    wanted = declared(method).dataset_kind if method is not None else "chat"
    if found.kind != wanted and method is None:
        raise Refused(f"{field} {label} holds {HOLDS.get(found.kind, found.kind)}; an evaluation reads {HOLDS[wanted]} "
                      "(the model answers each conversation and the grader scores the answer against its last "
                      "assistant message), so a dataset of pairs cannot be evaluated",
                      hint="evaluate on a chat dataset")
    if found.kind != wanted:
        other = reader_of(found.kind)  # the method that would train what the dataset holds
        holds = HOLDS.get(found.kind, found.kind)
        raise Refused(f"{field} {label} holds {holds}; method {method} trains on {HOLDS[wanted]}",
                      hint=f"name a {wanted} dataset" + (f", or train it with method {other}" if other else ""))
    return DatasetPick(label, version.digest, version.rows, version.tool_rows)


def _leaves(document: Any, prefix: str) -> list[str]:
    if isinstance(document, dict) and document:
        return [leaf for key, value in document.items() for leaf in _leaves(value, f"{prefix}{key}.")]
    return [prefix.rstrip(".")] if prefix else []


def _set(document: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for part in parents:
        document = document.setdefault(part, {})
    document[last] = value
