"""Job specs: what a worker is told about its job (`GET /v1/internal/jobs/{kind}/{id}`), typed once and shared by
server and worker. The server builds a kind's spec through its model (a missing or misspelled key fails there,
not in a worker minutes later); the worker reads it through the same model. Unknown keys are refused both ways.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from optimize.schemas.plans import Execution
from optimize.schemas.resolved import ResolvedConfig


class Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    def wire(self) -> dict[str, Any]:
        """As JSON carries it (camelCase)."""
        return self.model_dump(by_alias=True, mode="json")


class BaseModelSpec(Spec):
    id: str = Field(description="Catalog entry id")
    repository: str = Field(description="Hub repository")
    family: str = Field(description="Chat template family")
    commit: str = Field(description="The commit the job renders and loads")
    path: str | None = Field(description="Where this host caches the model")
    chat_template: str | None = Field(description="The catalog's chat template, where it replaces the model's")


class ObjectSpec(Spec):
    path: str = Field(description="The shard's path in its dataset version")
    sha256: str = Field(description="The shard's digest; the worker downloads it by this")
    bytes: int = Field(description="Size")
    rows: int = Field(description="Examples it holds")


class ImageSpec(Spec):
    path: str = Field(description="The image's path, as the rows name it")
    sha256: str = Field(description="The image's digest; the worker downloads it by this")
    bytes: int = Field(description="Size")


class ExamplesSpec(Spec):
    digest: str = Field(description="The dataset version's examples digest")
    rows: int = Field(description="Examples in all")
    objects: list[ObjectSpec] = Field(description="Its shards, in order")
    prepared: bool = Field(default=False, description="Whether its shards are Parquet files of prepared token rows "
                                                      "(input_ids, loss_mask), trained as given")
    images: list[ImageSpec] = Field(default_factory=list, description="The images its rows name")


class ArtifactSpec(Spec):
    kind: str = Field(description="weights or trainingState")
    manifest_sha256: str = Field(description="The digest of the artifact's manifest")


class ResumeSpec(Spec):
    snapshot_id: str = Field(description="The save restored")
    step: int = Field(description="Its step")
    artifacts: list[ArtifactSpec] = Field(description="Its artifacts")


class BranchSpec(Spec):
    restore: str = Field(description="weights or trainingState")
    step: int = Field(description="The parent's step it starts from")
    artifacts: list[ArtifactSpec] = Field(description="The parent save's artifacts")


class RunSpec(Spec):
    run_id: str = Field(description="The run")
    attempt: int = Field(description="This attempt's number")
    project: str = Field(description="Its project")
    method: str = Field(description="Its training method")
    config: ResolvedConfig = Field(description="The resolved config section of its plan (`schemas.resolved`)")
    execution: Execution = Field(description="The resolved execution section of its plan")
    devices: list[str] = Field(description="The devices granted")
    lease_seconds: float = Field(description="How long the lease holds without a heartbeat")
    dataset: ExamplesSpec = Field(description="The training examples")
    validation: ExamplesSpec | None = Field(description="The validation examples")
    model: BaseModelSpec = Field(description="The base model")
    resume: ResumeSpec | None = Field(description="The save a resumed attempt restores")
    branch: BranchSpec | None = Field(description="The parent's save a branch starts from")
    judges: dict[str, JudgeSpec] = Field(default_factory=dict,
                                         description="Each judge reward term's model, by the term's name")


class AnalysisSpec(Spec):
    analysis_id: str = Field(description="The analysis")
    kind: str = Field(description="chat or preference")
    format: str = Field(description="The dataset format")
    objects: list[ObjectSpec] = Field(description="The examples' shards, in order")
    images: list[ImageSpec] = Field(default_factory=list, description="The images its rows name")
    lease_seconds: float = Field(description="How long the lease holds without a heartbeat")
    model: BaseModelSpec = Field(description="The base model measured under")


class EvaluationDatasetSpec(Spec):
    reference: str = Field(description="NS/NAME:vN")
    digest: str = Field(description="Its examples digest")
    objects: list[ObjectSpec] = Field(description="Its shards, in order")
    images: list[ImageSpec] = Field(default_factory=list, description="The images its rows name")


class JudgeSpec(Spec):
    reference: str = Field(description="The judge model")
    adapter_manifest: str | None = Field(description="Its adapter's weights manifest, for a trained judge")
    instructions: str | None = Field(description="The judge's instructions")
    model: BaseModelSpec = Field(description="Its base model")


class SamplingSpec(Spec):
    generations: int = Field(description="Answers sampled per prompt")
    temperature: float = Field(description="Their sampling temperature (above 0)")
    seed: int = Field(description="The seed the batches are sampled from")


class EvaluationSpec(Spec):
    evaluation_id: str = Field(description="The evaluation")
    grader: str = Field(description="The grader")
    lease_seconds: float = Field(description="How long the lease holds without a heartbeat")
    dataset: EvaluationDatasetSpec = Field(description="The rows asked")
    model: BaseModelSpec = Field(description="The base model")
    adapter_manifest: str | None = Field(description="The adapter's weights manifest, for an adapter")
    judge: JudgeSpec | None = Field(description="The judge of a model:REF grader")
    max_new_tokens: int | None = Field(description="The answer's token budget")
    answered_lines: list[int] = Field(description="Lines answered from this commit already")
    sampling: SamplingSpec | None = Field(default=None, description="Several sampled answers per prompt; null: one "
                                                                    "greedy answer")
    rows: int | None = Field(default=None, description="The first rows asked; null: every row")
    response_schema: dict[str, Any] | None = Field(default=None, description="The JSON schema every answer keeps to")


class AdapterSpec(Spec):
    name: str = Field(description="The served name (NS/NAME:vN)")
    manifest: str = Field(description="Its weights manifest digest")
    instructions: str | None = Field(default=None, description="Its trained instructions: the system message a "
                                                               "request without one is answered with")


class EndpointSpec(Spec):
    endpoint_id: str = Field(description="The endpoint")
    lease_seconds: float = Field(description="How long the lease holds without a heartbeat")
    model: BaseModelSpec = Field(description="The resident base model")
    tool_call_parser: str | None = Field(description="How tool calls are read from answers")
    context_length: int | None = Field(description="The base model's context length")
    adapters: list[AdapterSpec] = Field(description="The adapters to serve")


class DistillationSettingsSpec(Spec):
    max_tokens: int = Field(description="Most tokens of one answer")
    max_model_length: int = Field(description="Most tokens of a prompt and its answer")
    temperature: float = Field(description="Sampling temperature (0: greedy)")
    top_p: float = Field(description="Nucleus sampling's probability mass")
    seed: int = Field(description="Seed of the sampled answers (each decision's own seed derives from it)")
    thinking: bool = Field(description="Whether a Gemma 4 teacher thinks")
    response_schema: dict[str, Any] | None = Field(default=None, description="The JSON schema every answer keeps to")


class DistillationSpec(Spec):
    distillation_id: str = Field(description="The distillation")
    lease_seconds: float = Field(description="How long the lease holds without a heartbeat")
    source: EvaluationDatasetSpec = Field(description="The source dataset version, its shards")
    model: BaseModelSpec = Field(description="The teacher's base model")
    adapter_manifest: str | None = Field(description="The teacher adapter's weights manifest, for an adapter")
    tool_call_parser: str | None = Field(description="How the teacher's tool calls are read")
    settings: DistillationSettingsSpec = Field(description="How it answers")
    replicas: int = Field(description="Devices held, one teacher replica on each")
    smoke: list[str] | None = Field(description="The smoke's named decisions, ROW:MESSAGE; null: the first 16")
    smoke_passed: bool = Field(description="Whether the smoke passed in an earlier attempt")
    answered: list[str] = Field(description="Decisions whose answers are saved already (not asked again)")
