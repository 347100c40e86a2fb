"""Base models and capacity: `/v1/training/base-models[/{id}][/select]` and `/v1/training/capacity`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from optimize.schemas.common import Answer, Number
from optimize.schemas.quotas import ProjectQuota

# --- requests ----------------------------------------------------------------------------------------------


class RenderLoss(BaseModel):
    """Which tokens train, as a run's `config.loss` says (the defaults: the final answer, its calls included)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    assistant_turns: str = Field(default="final", alias="assistantTurns", pattern="^(final|all)$",
                                 description="final or all: which assistant messages train")
    train_on_tool_calls: bool = Field(default=True, alias="trainOnToolCalls",
                                      description="Whether an earlier answer's tool calls train")


class RenderRequest(BaseModel):
    """`POST /v1/training/base-models/{id}/render`: a chat row, rendered as the model's template renders it."""

    model_config = ConfigDict(extra="forbid")
    row: dict[str, Any] = Field(description="A chat row (messages, and tools where it offers them)")
    loss: RenderLoss = Field(default_factory=RenderLoss, description="Which tokens train")


class SelectRequest(BaseModel):
    """`POST /v1/training/base-models/{id}/select` (the body may be left out)."""

    model_config = ConfigDict(extra="forbid")
    from_dir: str | None = Field(default=None, alias="from", description="Import this local snapshot folder")
    revision: str | None = Field(default=None, min_length=1, max_length=200,
                                 description="Hub branch, tag or commit to fetch (default: the pinned commit, "
                                             "else main); resolved to a commit once and recorded")


class AddRequest(BaseModel):
    """`POST /v1/training/base-models` (administrators): add a hub model to this deployment's catalog."""

    model_config = ConfigDict(extra="forbid")
    repository: str = Field(min_length=3, max_length=200,
                            description="Hub repository OWNER/NAME, optionally @REVISION (default: main)")
    family: str | None = Field(default=None, max_length=40,
                               description="Model family, where the architecture fits more than one "
                                           "(LlamaForCausalLM: llama3.2 or smollm2)")


# --- base models --------------------------------------------------------------------------------------------


class Parameters(Answer):
    total: int | None = Field(description="Total parameters; null when not known here")
    active: int | None = Field(description="Parameters active per token (differs from total for MoE)")
    source: str | None = Field(description="files (counted in the selected files) or catalog (the catalog's "
                                           "figure, before selection); null when not known")


class Measurement(Answer):
    by: str = Field(description="Who measured it")
    at: str = Field(description="When (ISO date)")
    hardware: str = Field(description="What hardware it ran on")


class Envelope(Answer):
    """A training envelope the catalog records: a measurement, never a promise."""

    method: str = Field(description="Training method: sft, dpo, grpo or gspo")
    adapter: str = Field(description="What trained: lora, full or qlora")
    engine: str = Field(description="Training engine: trl or verl")
    precision: str = Field(description="Training precision, e.g. bf16 or fp32")
    device_profile: str = Field(description="Device profile the run used")
    gpus: int = Field(description="Devices per run (0 for the cpu profile)")
    longest_sequence: int = Field(description="Longest sequence measured, tokens")
    gpu_memory_per_device_gib: Number | None = Field(alias="gpuMemoryPerDeviceGiB",
                                                     description="Peak device memory per device, GiB")
    host_memory_gib: Number = Field(alias="hostMemoryGiB", description="Peak host memory per node, GiB")
    tokens_per_second: Number | None = Field(description="Training throughput measured, tokens per second per device")
    kind: str = Field(description="Always measurement: what the figures are")
    measurement: Measurement = Field(description="Who measured the envelope, when and on what")
    conditions: dict[str, Any] | None = Field(
        default=None, description="The batch, checkpointing, rank and kernels its peak was measured with, where "
                                  "recorded (the memory estimate is calibrated on them)")


class Selection(Answer):
    """The weights this deployment selected for a base model."""

    commit: str = Field(description="The commit selected (for a stand-in: the digest of the files built)")
    content_digest: str = Field(description="sha256:HEX over the selected files")
    source: str = Field(description="Where the weights came from: hub, import or stand-in")
    path: str | None = Field(description="The folder holding them on the server; null unless the caller is an "
                                         "administrator")
    selected_at: str = Field(description="When it was selected (ISO 8601, UTC)")
    revision: str | None = Field(description="The hub revision asked for (--revision), resolved to `commit`; null "
                                             "when none was given")
    parameters: int | None = Field(description="Parameters counted in the selected files' safetensors headers")


class BaseModelEntry(Answer):
    """A catalog entry, with whether this deployment selected it."""

    id: str = Field(description="Entry id; commands accept it, the repository or an unambiguous prefix")
    repository: str = Field(description="Model repository (hub name)")
    commit: str | None = Field(description="The selected commit, else the catalog's pinned one; null when not known")
    family: str = Field(description="Model family; selects rendering rules")
    takes_images: bool = Field(description="Whether it reads images in user messages (rows with images train, "
                                           "evaluate and are served on it)")
    parameters: Parameters = Field(description="Parameter counts")
    context_length: int | None = Field(description="Context length, tokens")
    allowed_for: list[str] = Field(description="What it may do: training, serving")
    serving_only: bool = Field(description="Whether it is allowed for serving only")
    methods: list[str] = Field(description="Training methods it has measured envelopes for")
    status: str = Field(description="ready once selected on this deployment, else not-selected")
    stand_in: bool = Field(description="Whether it is a stand-in built locally, offline")


class SelectionDownload(Answer):
    """The hub download of a selection under way."""

    repository: str = Field(description="The repository being fetched")
    commit: str = Field(description="The commit being fetched")
    bytes: int = Field(description="Bytes received so far")
    total_bytes: int | None = Field(description="Bytes of the files the selection takes; null when the hub did not say")
    files: int | None = Field(description="Files the selection takes")
    started_at: str = Field(description="When the download started (ISO 8601, UTC)")


class BaseModelDetail(BaseModelEntry):
    """A catalog entry in full: its envelopes, notes and selection."""

    download: SelectionDownload | None = Field(
        default=None, description="The hub download of a selection under way (while `select` runs); null otherwise")

    catalog_commit: str | None = Field(description="The commit the catalog pins; null when not known here")
    commit_note: str | None = Field(description="Why the commit is what it is")
    architecture: dict[str, Any] = Field(description="Architecture config highlights")
    tool_call_parser: str | None = Field(description="Serving tool-call parser")
    served_on: list[str] = Field(description="Device profiles it serves on")
    chat_template: str = Field(description="shipped, corrected or optimize: whose chat template renders it")
    adapt_experts: bool = Field(description="Whether lora.adaptExperts is accepted for it")
    notes: str | None = Field(description="What is not known here, and other remarks")
    chat_template_sha256: str | None = Field(
        alias="chatTemplateSha256", description="sha256 of the chat template in the repository's files, where measured")
    added_at: str | None = Field(description="When base-models add added it here; null for catalog-file entries")
    envelopes: list[Envelope] = Field(description="Measured training envelopes")
    selection: Selection | None = Field(description="The selection on this deployment; null when not selected")


class BaseModelList(Answer):
    models: list[BaseModelEntry] = Field(description="Every catalog entry")
    envelopes: str = Field(description="strict (a run needs a measured envelope) or advisory")


class RenderedRow(Answer):
    """A row as the model sees it: its text, and each token with whether it trains."""

    model: str = Field(description="The base model's entry id")
    chat_template_sha256: str = Field(description="The digest of the chat template it was rendered with")
    text: str = Field(description="The rendered text")
    tokens: list[tuple[str, bool]] = Field(description="Each token's text and whether it trains, in order")
    total_tokens: int = Field(description="Tokens in all")
    trained_tokens: int = Field(description="Tokens that train")
    tools: list[str | None] = Field(description="The names of the tools the row offers")
    loss: dict[str, Any] = Field(description="The loss policy it was rendered under")


# --- capacity -----------------------------------------------------------------------------------------------


class Pool(Answer):
    """A device profile's devices: free, granted and queued for."""

    pool: str = Field(description="Pool the devices belong to")
    profile: str = Field(description="Device profile name")
    kind: str = Field(description="cpu or gpu")
    accelerator: str | None = Field(description="Accelerator model, e.g. NVIDIA H200")
    memory_gib: Number | None = Field(alias="memoryGiB", description="Memory per device, GiB")
    declared: int = Field(description="Devices declared")
    online: int = Field(description="Devices the executor's machines offer now (a cluster's live nodes; on one "
                                    "machine every declared device)")
    free: int = Field(description="Devices no one holds")
    granted: int = Field(description="Devices held")
    queued: int = Field(description="Devices queued runs wait for")


class Device(Answer):
    device: str = Field(description="Device id: PROFILE:INDEX")
    profile: str = Field(description="Device profile")
    pool: str = Field(description="Pool")
    held: bool = Field(description="Whether someone holds it")
    held_by: str | None = Field(description="Who holds it (KIND:ID); null when free")


class Claim(Answer):
    """A claim on devices: granted holds, then queued runs."""

    kind: str = Field(description="What claims: a run's method, EVALUATION or ENDPOINT (upper case)")
    subject: str = Field(description="KIND:ID of the claimant")
    for_: str = Field(alias="for", description="The claimant's id")
    project: str | None = Field(description="The claimant's project")
    devices: list[str] = Field(description="Devices held (empty while queued)")
    count: int | None = Field(default=None, description="Devices a queued run waits for (queued claims only)")
    profile: str = Field(description="Device profile")
    state: str = Field(description="GRANTED or QUEUED")
    since: str | None = Field(description="Since when (ISO 8601, UTC)")


class Node(Answer):
    """A machine of a cluster executor."""

    node: str = Field(description="The cluster's node id")
    address: str | None = Field(description="The node's address")
    alive: bool = Field(description="Whether the node is in the cluster now")
    profiles: dict[str, int] = Field(description="Devices the node offers, by device profile")
    gpus: int = Field(description="GPUs on the node")


class Capacity(Answer):
    """Pools, devices and claims, read from the store as the scheduler decides on them."""

    executor: str | None = Field(description="Where workers run: local (this host) or ray (a cluster's nodes)")
    nodes: list[Node] | None = Field(description="A cluster's nodes; null on one machine")
    pools: list[Pool] = Field(description="One per device profile")
    devices: list[Device] = Field(description="Every device and its holder")
    claims: list[Claim] = Field(description="Granted holds, then queued runs")
    projects: list[ProjectQuota] = Field(description="Each training project's quota and what it uses now (the "
                                                     "project asked for, else every open project)")
    envelopes: str = Field(description="strict or advisory: how runs without a measured envelope are admitted")
    warnings: list[str] = Field(description="What the operator should know")
