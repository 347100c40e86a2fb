"""Pipelines: `/v1/training/pipelines` — a plan of ordered stages (curate, distill, train, evaluate), later stages
naming an earlier stage's output as `@STAGE`; the answers: a pipeline with each stage's state, job and output."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import ConfigDict, Field

from optimize.schemas.common import Answer, Number
from optimize.schemas.progress import Count
from optimize.schemas.requests import Refusal, RequestModel

STAGE_NAME = re.compile(r"^[a-z][a-z0-9-]{0,62}$")
MOST_STAGES = 20
MOST_MIXED = 8  # datasets one train stage's config.dataset may list
REFERENCE = re.compile(r"^@([^:/\s]+)$")  # `@STAGE`: an earlier stage's output


def stage_reference(value: Any) -> str | None:
    """The stage a value names as `@STAGE`, or None for an ordinary reference."""
    match = REFERENCE.match(value) if isinstance(value, str) else None
    return match.group(1) if match else None


# --- requests ----------------------------------------------------------------------------------------------


class PipelinePlan(RequestModel):
    """A pipeline plan (`kind: pipeline`): the project every stage works in and its ordered stages."""

    model_config = ConfigDict(extra="forbid")
    not_an_object: ClassVar[Refusal] = Refusal("a pipeline plan must be one object: kind: pipeline, project, stages")

    kind: Annotated[Literal["pipeline"], Refusal("kind must be pipeline")] = Field(description="Always pipeline")
    project: Annotated[str, Refusal("a pipeline needs project (the training project its stages work in)")] = Field(
        pattern=r"\S", description="The training project every stage works in")
    stages: Annotated[list[dict[str, Any]], Refusal(
        f"stages must be a list of 1 to {MOST_STAGES} stage objects (each with name and type)")] = Field(
        min_length=1, max_length=MOST_STAGES, description="The stages, in the order they run")
    submission_id: Annotated[str | None, Refusal("submissionId must be a string")] = Field(
        default=None, max_length=128, description="Idempotency key: the same id reaches the same pipeline")
    description: Annotated[str | None, Refusal("description must be a string")] = Field(
        default=None, max_length=4000, description="Free text")


class StageBase(RequestModel):
    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Refusal("a stage needs name (lower-case letters, digits and -, starting with a letter)")
                    ] = Field(pattern=STAGE_NAME.pattern, description="The stage's name, unique in the pipeline")


class TrainStage(StageBase):
    """A run: the run plan's content (its project is the pipeline's); `config.dataset`, `config.validation.dataset`
    and `source.model` may name an earlier stage's output. `config.dataset` may list several datasets: they register
    together as one version of `mixedDataset`, which the run reads."""

    type: Literal["train"] = Field(description="train: a run")
    base_model: Annotated[str, Refusal("a train stage needs baseModel")] = Field(description="The run's base model")
    model_name: Annotated[str | None, Refusal("modelName must be a string")] = Field(
        default=None, description="The name its model registers under")
    config: Annotated[dict[str, Any], Refusal("a train stage needs config (the run's config)")] = Field(
        description="The run's config, as a run plan's; config.dataset and config.validation.dataset may be @STAGE, "
                    "and config.dataset a list of datasets to mix (with mixedDataset)")
    mixed_dataset: Annotated[str | None, Refusal("mixedDataset must be a dataset name NS/NAME")] = Field(
        default=None, description="NS/NAME the datasets config.dataset lists register under together, as one "
                                  "version, before the run starts")
    execution: Annotated[dict[str, Any] | None, Refusal("execution must be an object")] = Field(
        default=None, description="The run's execution, as a run plan's")
    source: Annotated[dict[str, Any] | None, Refusal("source must be an object (source.model)")] = Field(
        default=None, description="Start from existing weights: source.model, a registered adapter or @STAGE")
    description: Annotated[str | None, Refusal("description must be a string")] = Field(
        default=None, description="The run's description")
    config_name: Annotated[str | None, Refusal("configName must be a string")] = Field(
        default=None, description="The run's column in scores tables")


class EvaluateStage(StageBase):
    """An evaluation: `model` and `dataset` (and the judge of a `model:` grader) may name an earlier stage's output;
    `minMeanScore` gates the stages after it."""

    type: Literal["evaluate"] = Field(description="evaluate: an evaluation")
    model: Annotated[str, Refusal("an evaluate stage needs model (a model, or @STAGE of a train stage)")] = Field(
        description="The model evaluated: a model reference or @STAGE of a train stage")
    dataset: Annotated[str, Refusal("an evaluate stage needs dataset (a chat dataset, or @STAGE)")] = Field(
        description="The chat dataset it answers: a reference or @STAGE of a distill stage")
    grader: Annotated[str | None, Refusal("grader must be a string")] = Field(
        default=None, description="As evaluations take it; model:@STAGE names a train stage's model as the judge")
    grader_instructions: Annotated[str | None, Refusal("graderInstructions must be a string")] = Field(
        default=None, description="A judge's instructions")
    max_new_tokens: Annotated[int | None, Refusal("maxNewTokens must be an integer from 1 to 32768")] = Field(
        default=None, ge=1, le=32768, description="Most tokens an answer")
    device_profile: Annotated[str | None, Refusal("deviceProfile must be a string")] = Field(
        default=None, description="Where it answers (default cpu)")
    min_mean_score: Annotated[float | None, Refusal("minMeanScore must be a number from 0 to 1")] = Field(
        default=None, ge=0, le=1, description="The least mean score for the later stages to start")


class DistillStage(StageBase):
    """A distillation: `teacher` may name a train stage's model and `from` a stage's dataset; it registers `to`."""

    model_config = ConfigDict(extra="allow")  # the distillation's own settings, read by its request when it starts
    type: Literal["distill"] = Field(description="distill: a distillation")
    teacher: Annotated[str, Refusal("a distill stage needs teacher")] = Field(
        description="The teacher: a model reference or @STAGE of a train stage")
    from_: Annotated[str, Refusal("a distill stage needs from (the chat dataset the teacher answers)")] = Field(
        alias="from", description="The chat dataset it answers: a reference or @STAGE of a distill stage")
    to: Annotated[str, Refusal("a distill stage needs to (NS/NAME the accepted rows register under)")] = Field(
        description="NS/NAME the accepted rows register under")


class CurateStage(StageBase):
    """A curation: `judge` may name a train stage's model; it registers the kept candidates as `dataset`."""

    model_config = ConfigDict(extra="allow")  # the curation's own fields, read by its request when it starts
    type: Literal["curate"] = Field(description="curate: a curation")
    judge: Annotated[str, Refusal("a curate stage needs judge")] = Field(
        description="The judging model: a model reference or @STAGE of a train stage")
    dataset: Annotated[str, Refusal("a curate stage needs dataset (NS/NAME the kept candidates register under)")
                       ] = Field(description="NS/NAME the kept candidates register under")


STAGES: dict[str, type[StageBase]] = {"curate": CurateStage, "distill": DistillStage, "train": TrainStage,
                                      "evaluate": EvaluateStage}
OUTPUTS = {"train": "model", "distill": "dataset", "curate": "dataset", "evaluate": None}  # what a stage gives


# --- answers ------------------------------------------------------------------------------------------------


class StageState(Answer):
    name: str = Field(description="The stage's name")
    type: str = Field(description="curate, distill, train or evaluate")
    state: str = Field(description="waiting, running, completed, failed, cancelled or skipped (a gate stopped the "
                                   "pipeline, or a stage before it failed)")
    job_kind: str | None = Field(description="run, evaluation or distillation, once started")
    job_id: str | None = Field(description="Its job, once started")
    job_phase: str | None = Field(description="Its job's phase")
    attempt: int = Field(description="How many times the stage was started (a resume starts a failed one again)")
    output: str | None = Field(description="What it gave the stages after it: a model version or a dataset version")
    mean_score: Number | None = Field(description="An evaluate stage's mean score")
    min_mean_score: Number | None = Field(description="Its gate")
    device_seconds: Number | None = Field(description="Its job's device seconds")
    reason: str | None = Field(description="Why it failed, or what its gate decided")


class Pipeline(Answer):
    pipeline_id: str = Field(description="The pipeline's id")
    project: str = Field(description="Its training project")
    phase: str = Field(description="PENDING, RUNNING, COMPLETED, FAILED or CANCELLED")
    stages: list[StageState] = Field(description="Each stage, in order")
    count: Count | None = Field(description="Stages completed of all")
    device_seconds: Number = Field(description="Every stage's device seconds together")
    description: str | None = Field(description="Free text")
    failure_reason: str | None = Field(description="Why it failed (a stage's failure, or a gate)")
    created_by: str | None = Field(description="The name of the token that started it")
    created_at: str = Field(description="When it was started")
    finished_at: str | None = Field(description="When it ended")
    terminal: bool = Field(description="Whether it has ended")
    settled: bool = Field(description="Whether `wait` stops here")


class PipelineList(Answer):
    pipelines: list[Pipeline] = Field(description="Newest first")


class PipelineDryRun(Answer):
    dry_run: Literal[True] = Field(description="Nothing was started")
    project: str = Field(description="Its training project")
    stages: list[dict[str, Any]] = Field(description="Each stage: its name, type, what it reads from earlier stages, "
                                                     "and what was checked now (a train stage over registered "
                                                     "datasets: its run's dry run)")
