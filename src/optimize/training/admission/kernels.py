"""Default kernels by model type, applied where a run does not set its own.

Two rules, both only on GPU profiles:
- Liger's layer kernels (rms_norm, swiglu, rope) for a supervised run of a family Liger patches (Llama, Qwen2,
  Mistral architectures), where this deployment has `liger-kernel` installed (the `gpu` extra). With bare TRL on
  one H200 they trained a model of Llama-3.2-1B's shape at 45,387 steady tokens/s against 38,513 without, and cut
  its peak from 38.2 to 32.3 GiB. Not fused_linear_cross_entropy: TRL's supervised trainer computes the
  loss with its own fused LM head, which Liger's would replace (TRL refuses it). A dpo or grpo run takes none this
  way: there TRL reads `use_liger_kernel` as its fused loss.
- Measured on H200 devices, for runs on more than one of them: Gemma 4 E2B, E4B and 12B train with flex_attention;
  E2B and E4B also with Liger's rms_norm and geglu.

A run that sets a value keeps it. The defaults become part of the run's resolved configuration, so they are in
its configuration hash.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from optimize.training.methods import declared

MEASURED_PROFILE = "h200"
FLEX_ATTENTION = frozenset({"google/gemma-4-e2b-it", "google/gemma-4-e4b-it", "google/gemma-4-12b-it"})
LIGER_NORM_GEGLU = frozenset({"google/gemma-4-e2b-it", "google/gemma-4-e4b-it"})
LIGER_FAMILIES = frozenset({"LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM"})
LIGER_KERNELS = ("rms_norm", "swiglu", "rope")


def liger_installed() -> bool:
    """Whether this deployment can run Liger's kernels (the `gpu` extra installs them; they need Triton)."""
    return importlib.util.find_spec("liger_kernel") is not None


def default_kernels(entry, method: str, device_profile: str, devices: int, on_gpu: bool,
                    liger: bool | None = None) -> dict[str, Any]:
    """The kernel settings (as config paths) that apply to this model and method on these devices."""
    model = entry.repository.lower()
    chosen: dict[str, Any] = {}
    liger = liger_installed() if liger is None else liger
    if on_gpu and liger and declared(method).liger_kernels and entry.architecture.get("class") in LIGER_FAMILIES:
        chosen.update({f"liger.{kernel}": True for kernel in LIGER_KERNELS})
    if device_profile != MEASURED_PROFILE or devices <= 1:
        return chosen
    if model in FLEX_ATTENTION:
        chosen["model.attentionImplementation"] = "flex_attention"
    if model in LIGER_NORM_GEGLU:
        chosen["liger.rms_norm"] = True
        chosen["liger.geglu"] = True
    return chosen
