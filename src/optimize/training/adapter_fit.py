"""Whether a PEFT LoRA adapter made elsewhere fits a base model, read from the files alone (no torch: the server reads
them): its `adapter_config.json` (a LoRA adapter, not DoRA, no `modules_to_save`, a rank within bounds, made for this
base model and commit where it says so) and its `adapter_model.safetensors` (every module it adapts is a linear
module of the base, `lora_A` reading the base module's inputs and `lora_B` writing its outputs, at the config's
rank). Each refusal names the base, the module and both shapes, so the user sees what does not fit.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optimize.core.errors import Invalid, Refused

MOST_RANK = 1024  # the rank a plan may train at most (`schemas/plans.py` Lora.rank): what endpoints load
PEFT_PREFIX = "base_model.model."  # how PEFT names the base's modules inside an adapter's tensors


@dataclass(frozen=True)
class LoraAdapter:
    """What an adapter that fits says of itself: its rank, alpha, and the modules (q_proj, …) it adapts."""

    rank: int
    alpha: float
    modules: list[str]


def tensor_shapes(path: Path, what: str) -> dict[str, list[int]]:
    """The tensors of a safetensors file by name, with their shapes (its header alone is read)."""
    try:
        with path.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            if length > 100 * 1024 * 1024:
                raise ValueError("header too large")
            header = json.loads(handle.read(length))
        return {name: list(entry["shape"]) for name, entry in header.items() if name != "__metadata__"}
    except (OSError, ValueError, KeyError, TypeError, struct.error) as error:
        raise Invalid(f"{what} is not a safetensors file ({type(error).__name__}: {error})",
                      hint="give the adapter_model.safetensors PEFT's save_pretrained writes") from None


def base_shapes(folder: Path) -> dict[str, list[int]]:
    """The base model's weights by name with their shapes, from `model.safetensors` or every shard its index names."""
    index = folder / "model.safetensors.index.json"
    files = (sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.is_file()
             else ["model.safetensors"])
    shapes: dict[str, list[int]] = {}
    for name in files:
        shapes.update(tensor_shapes(folder / name, f"the base model's {name}"))
    return shapes


def read_config(text: bytes) -> dict[str, Any]:
    try:
        config = json.loads(text)
    except ValueError as error:
        raise Invalid(f"adapter_config.json is not JSON: {error}", hint="give the file PEFT's save_pretrained "
                                                                       "writes") from None
    if not isinstance(config, dict):
        raise Invalid("adapter_config.json is not a JSON object", hint="give the file PEFT's save_pretrained writes")
    return config


def check_fit(config: dict[str, Any], adapter: dict[str, list[int]], base: dict[str, list[int]], base_label: str,
              repository: str, commit: str, others: dict[str, str]) -> LoraAdapter:
    """The adapter as it will be served, or the refusal naming what does not fit `base_label` (its repository and
    commit are what the config may name; `others`, the catalog's other entries by lowercased repository, are the
    bases it may name instead)."""
    kind = str(config.get("peft_type", "")).upper()
    if kind != "LORA":
        raise Refused(f"the adapter is not a LoRA adapter (adapter_config.json says peft_type "
                      f"{config.get('peft_type')!r})", hint="import a PEFT LoRA adapter")
    if config.get("use_dora"):
        raise Refused("the adapter is a DoRA adapter (use_dora: true); endpoints serve LoRA adapters only",
                      hint="train it without use_dora and import it again")
    if config.get("modules_to_save"):
        raise Refused(f"the adapter saves whole modules beside its LoRA weights (modules_to_save: "
                      f"{config['modules_to_save']}); endpoints serve LoRA weights only",
                      hint="train it without modules_to_save and import it again")
    rank = config.get("r")
    if type(rank) is not int or not 1 <= rank <= MOST_RANK:
        raise Refused(f"the adapter's rank r is {rank!r}; an imported adapter has a rank from 1 to {MOST_RANK}",
                      hint="give the adapter_config.json PEFT wrote for it")
    named = config.get("base_model_name_or_path")
    other = others.get(named.lower()) if isinstance(named, str) and named.lower() != repository.lower() else None
    if other is not None:  # a local folder's path names no repository: the shapes decide
        raise Refused(f"the adapter was made for {named}, not for base model {base_label} ({repository})",
                      hint=f"import it with --base {other}, selected on this deployment")
    revision = config.get("revision")
    if isinstance(revision, str) and len(revision) == 40 and revision != commit:
        raise Refused(f"the adapter was made at commit {revision} of {repository}; base model {base_label} is "
                      f"selected at {commit}", hint="select the base model at that commit, or import an adapter "
                                                    "made at this one")
    modules = _check_shapes(adapter, base, base_label, rank)
    return LoraAdapter(rank, float(config.get("lora_alpha") or rank), modules)


def _check_shapes(adapter: dict[str, list[int]], base: dict[str, list[int]], base_label: str, rank: int) -> list[str]:
    pairs: dict[str, dict[str, list[int]]] = {}
    for name, shape in adapter.items():
        if "lora_magnitude_vector" in name:
            raise Refused(f"the adapter holds DoRA magnitudes ({name}); endpoints serve LoRA adapters only",
                          hint="train it without use_dora and import it again")
        for part in ("lora_A", "lora_B"):
            suffix = f".{part}.weight"
            if name.endswith(suffix):
                module = name.removeprefix(PEFT_PREFIX).removesuffix(suffix)
                pairs.setdefault(module, {})[part] = shape
                break
        else:
            raise Refused(f"the adapter holds a tensor that is not a LoRA weight: {name}",
                          hint="import an adapter of lora_A and lora_B weights only (no modules_to_save, no biases)")
    if not pairs:
        raise Refused("the adapter holds no LoRA weights (no lora_A and lora_B tensors)",
                      hint="give the adapter_model.safetensors PEFT's save_pretrained writes")
    for module, parts in sorted(pairs.items()):
        weight = base.get(f"{module}.weight")
        if weight is None:
            raise Refused(f"the adapter adapts module {module}, which base model {base_label} does not have",
                          hint="import it over the base model it was trained on")
        a, b = parts.get("lora_A"), parts.get("lora_B")
        if a is None or b is None:
            raise Refused(f"module {module} has {'lora_A' if a else 'lora_B'} but no "
                          f"{'lora_B' if a else 'lora_A'} in the adapter", hint="give the adapter's whole file")
        out_features, in_features = weight if len(weight) == 2 else (None, None)
        if len(a) != 2 or len(b) != 2 or a[1] != in_features or b[0] != out_features or a[0] != rank or b[1] != rank:
            raise Refused(f"the adapter does not fit base model {base_label}: module {module} is {weight} in the "
                          f"base, and the adapter's lora_A is {a} and lora_B {b} (rank {rank} expects lora_A "
                          f"[{rank}, {in_features}] and lora_B [{out_features}, {rank}])",
                          hint="import it over the base model it was trained on, with its own adapter_config.json")
    return sorted({module.rsplit(".", 1)[-1] for module in pairs})
