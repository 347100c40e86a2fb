"""Default kernels by model type: measured speed-ups applied where a run does not set its own.

Only on H200 devices, where they were measured, and only for runs on more than one of them: Gemma 4 E2B, E4B and
12B train with flex_attention; E2B and E4B also with Liger's rms_norm and geglu. A run that sets a value keeps
it. The defaults become part of the run's resolved configuration, so they are in its configuration hash.
"""

from __future__ import annotations

from typing import Any

MEASURED_PROFILE = "h200"
FLEX_ATTENTION = frozenset({"google/gemma-4-e2b-it", "google/gemma-4-e4b-it", "google/gemma-4-12b-it"})
LIGER_NORM_GEGLU = frozenset({"google/gemma-4-e2b-it", "google/gemma-4-e4b-it"})


def default_kernels(repository: str, device_profile: str, devices: int) -> dict[str, Any]:
    """The kernel settings (as config paths) that apply to this model on these devices."""
    model = repository.lower()
    if device_profile != MEASURED_PROFILE or devices <= 1:
        return {}
    chosen: dict[str, Any] = {}
    if model in FLEX_ATTENTION:
        chosen["model.attentionImplementation"] = "flex_attention"
    if model in LIGER_NORM_GEGLU:
        chosen["liger.rms_norm"] = True
        chosen["liger.geglu"] = True
    return chosen
