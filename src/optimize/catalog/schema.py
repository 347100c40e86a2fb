"""The catalog file format: entries, measured envelopes, devices, and the admission mode.

Every field is declared with a description; unknown fields are refused by name (`extra="forbid"`). A figure
not known when the catalog was written is left null, with a note saying so — never invented.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from optimize.core.names import is_valid_name
from optimize.jobs.devices import DeviceProfile  # the kernel's pools; declared here under `devices:`


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Measurement(_Strict):
    by: str = Field(description="Who measured it")
    at: str = Field(description="When (ISO date)")
    hardware: str = Field(description="What hardware it ran on")


class EnvelopeConditions(_Strict):
    """What a measured peak depends on beyond the envelope's own fields: the memory estimate is calibrated on it."""

    batch_size: int = Field(alias="batchSize", gt=0, description="Rows per device in one micro-batch")
    gradient_checkpointing: bool = Field(alias="gradientCheckpointing", description="Whether activations were "
                                                                                   "recomputed")
    lora_rank: int = Field(alias="loraRank", gt=0, description="LoRA rank, on all linear layers")
    liger: dict[str, bool] = Field(default_factory=dict, description="Liger kernels that were on")


class Envelope(_Strict):
    method: Literal["sft", "dpo", "grpo", "gspo"] = Field(description="Training method")
    adapter: Literal["lora", "full", "qlora"] = Field(default="lora", description="What trained: a LoRA adapter, "
                                                                                  "every weight, or qlora")
    engine: Literal["trl", "verl"] = Field(description="Training engine")
    precision: str = Field(description="Training precision, e.g. bf16 or fp32")
    device_profile: str = Field(alias="deviceProfile", description="Device profile the run used")
    gpus: int = Field(ge=0, description="Devices per run (0 for the cpu profile)")
    longest_sequence: int = Field(alias="longestSequence", gt=0, description="Longest sequence measured, tokens")
    gpu_memory_per_device_gib: float | None = Field(
        default=None, alias="gpuMemoryPerDeviceGiB", description="Peak device memory per device, GiB")
    host_memory_gib: float = Field(alias="hostMemoryGiB", description="Peak host memory per node, GiB")
    tokens_per_second: float | None = Field(default=None, alias="tokensPerSecond",
                                            description="Training throughput measured, tokens per second per device")
    measurement: Measurement = Field(description="Who measured the envelope, when and on what")
    conditions: EnvelopeConditions | None = Field(
        default=None, description="The batch, checkpointing, rank and kernels its peak was measured with, where "
                                  "recorded (the memory estimate is calibrated on them)")


class StandInSpec(_Strict):
    family: str = Field(description="Family whose architecture, special tokens and template it uses")
    size: Literal["tiny", "small"] = Field(default="tiny", description="tiny for tests, small for the quickstart")


class Parameters(_Strict):
    total: int | None = Field(description="Total parameters; null when not known here")
    active: int | None = Field(description="Parameters active per token (differs from total for MoE)")


class Entry(_Strict):
    id: str = Field(description="Entry id; commands accept it, the repository or an unambiguous prefix")
    repository: str = Field(description="Model repository (hub name)")
    commit: str | None = Field(description="Pinned repository commit; null when not known here")
    commit_note: str | None = Field(default=None, alias="commitNote", description="Why the commit is what it is")
    family: str = Field(description="Model family; selects rendering rules")
    architecture: dict[str, str | int | float | bool | None] = Field(description="Architecture config highlights")
    parameters: Parameters
    context_length: int | None = Field(alias="contextLength", description="Context length, tokens")
    allowed_for: list[Literal["training", "serving"]] = Field(alias="allowedFor", description="What it may do")
    tool_call_parser: str | None = Field(default=None, alias="toolCallParser", description="Serving tool parser")
    served_on: list[str] = Field(default_factory=list, alias="servedOn", description="Device profiles it serves on")
    chat_template: str = Field(default="shipped", alias="chatTemplate",
                               description="shipped (the repository's), corrected (Optimize's corrected copy) or "
                                           "optimize (Optimize's own, for stand-ins whose family TRL ships none)")
    adapt_experts: bool = Field(default=False, alias="adaptExperts",
                                description="Whether lora.adaptExperts is accepted for it")
    envelopes: list[Envelope] = Field(default_factory=list, description="Measured training envelopes")
    stand_in: StandInSpec | None = Field(default=None, alias="standIn", description="Built locally, offline")
    notes: str | None = Field(default=None, description="What is not known here, and other remarks")
    chat_template_sha256: str | None = Field(
        default=None, alias="chatTemplateSha256",
        description="sha256 of the chat template in the repository's files at the pinned commit, where measured")
    added_at: str | None = Field(default=None, alias="addedAt",
                                 description="When `base-models add` added it to this deployment (ISO 8601); "
                                             "null for entries of the catalog file")

    @property
    def serving_only(self) -> bool:
        return "training" not in self.allowed_for


class CatalogSettings(_Strict):
    strict_envelopes: bool = Field(default=False, alias="strict-envelopes",
                                   description="Require a measured envelope for every run (advisory when false)")


class TrainerSettings(_Strict):
    base_model_catalog: CatalogSettings = Field(default_factory=CatalogSettings, alias="base-model-catalog")


class CatalogFile(_Strict):
    trainer: TrainerSettings = Field(default_factory=TrainerSettings)
    devices: list[DeviceProfile] = Field(default_factory=list, description="Declared device profiles")
    models: list[Entry] = Field(description="Catalog entries")


def entry_id_problems(entries: list[Entry]) -> list[str]:
    seen: set[str] = set()
    problems = []
    for entry in entries:
        if entry.id in seen:
            problems.append(f"entry id {entry.id!r} appears twice")
        seen.add(entry.id)
        if not all(is_valid_name(part.lower()) for part in entry.id.split("/")):
            problems.append(f"entry id {entry.id!r} is not a valid name")
    return problems
