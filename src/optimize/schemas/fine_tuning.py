"""OpenAI's fine-tuning routes in OpenAI's own shapes: the job a `POST /v1/fine_tuning/jobs` asks for (its `method`,
`hyperparameters`, `suffix`, `seed`), and the file, job, event and checkpoint objects, and their cursor pages, that
the routes answer. Keys are snake_case, as OpenAI's clients send and read them; a refusal names the parameter
(`param`) as OpenAI's error object does."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import ConfigDict, Field

from optimize.schemas.common import OpenAIAnswer
from optimize.schemas.plans import MOST_BATCH, MOST_EPOCHS
from optimize.schemas.requests import Refusal, RequestModel

Epochs = Annotated[int, Field(ge=1, le=MOST_EPOCHS)]
Batch = Annotated[int, Field(ge=1, le=MOST_BATCH)]
Multiplier = Annotated[float, Field(gt=0, le=1000, allow_inf_nan=False)]
Beta = Annotated[float, Field(gt=0, le=100, allow_inf_nan=False)]


class OpenAIRequest(RequestModel):
    """A request body of OpenAI's: snake_case keys, read strictly, unknown keys refused, each refusal naming the
    parameter it is about."""

    model_config = ConfigDict(alias_generator=None, populate_by_name=True, strict=True, extra="forbid")
    names_param: ClassVar[bool] = True
    unknown_fields: ClassVar[Refusal] = Refusal("unknown parameter(s): {names}", hint="parameters: {fields}")


class Hyperparameters(OpenAIRequest):
    n_epochs: Annotated[Literal["auto"] | Epochs, Refusal(
        f'n_epochs must be "auto" or an integer from 1 to {MOST_EPOCHS}, not {{shown}}')] = Field(
        default="auto", description='Passes over the training file ("auto": 3, more for a small file, fewer for a '
                                    'large one, as OpenAI chooses)')
    batch_size: Annotated[Literal["auto"] | Batch, Refusal(
        f'batch_size must be "auto" or an integer from 1 to {MOST_BATCH}, not {{shown}}')] = Field(
        default="auto", description='Rows a batch ("auto": the run plan\'s default)')
    learning_rate_multiplier: Annotated[Literal["auto"] | Multiplier, Refusal(
        'learning_rate_multiplier must be "auto" or a number above 0 and at most 1000, not {shown}')] = Field(
        default="auto", description="The run plan's default learning rate times this")


class DpoHyperparameters(Hyperparameters):
    beta: Annotated[Literal["auto"] | Beta, Refusal(
        'beta must be "auto" or a number above 0 and at most 100, not {shown}')] = Field(
        default="auto", description='DPO beta ("auto": the run plan\'s default)')


class Supervised(OpenAIRequest):
    hyperparameters: Hyperparameters = Field(default_factory=Hyperparameters, description="The run's loop")


class Dpo(OpenAIRequest):
    hyperparameters: DpoHyperparameters = Field(default_factory=DpoHyperparameters, description="The run's loop")


class Method(OpenAIRequest):
    type: Annotated[Literal["supervised", "dpo"], Refusal(
        'method.type must be "supervised" or "dpo" (reinforcement fine-tuning is a grpo run plan: akka training '
        'runs create), not {shown}')] = Field(description="supervised (an sft run) or dpo")
    supervised: Supervised | None = Field(default=None, description="The supervised run's hyperparameters")
    dpo: Dpo | None = Field(default=None, description="The dpo run's hyperparameters")


class FineTuningJobRequest(OpenAIRequest):
    """A fine-tuning job: an sft or dpo run of a base model over an uploaded file."""

    model: Annotated[str, Refusal("model must name a base model of this deployment",
                                  missing="model is required: the base model to fine-tune")] = Field(
        min_length=1, max_length=300, description="A base model (or a name OPTIMIZE_FINE_TUNING_MODELS maps to one)")
    training_file: Annotated[str, Refusal("training_file must be a file id (file-…)",
                                          missing="training_file is required: the id of an uploaded file")] = Field(
        min_length=1, max_length=200, description="The id of a file uploaded with purpose fine-tune")
    validation_file: Annotated[str | None, Refusal("validation_file must be a file id (file-…)")] = Field(
        default=None, max_length=200, description="The id of a file of validation rows")
    hyperparameters: Hyperparameters | None = Field(default=None, description="Older spelling of "
                                                                              "method.supervised.hyperparameters")
    method: Method | None = Field(default=None, description="supervised (default) or dpo, with its hyperparameters")
    suffix: Annotated[str | None, Refusal("suffix must be 1 to 64 characters")] = Field(
        default=None, min_length=1, max_length=64, description="The fine-tuned model's name in the registry")
    seed: Annotated[int | None, Refusal("seed must be an integer from 0 to 4294967295")] = Field(
        default=None, ge=0, le=2**32 - 1, description="Seed for data order, initialization and sampling")
    metadata: dict[str, Any] | None = Field(default=None, description="Not kept: refused when it holds keys")
    integrations: list[Any] | None = Field(default=None, description="Not taken: the server forwards every run's "
                                                                     "metrics to the trackers it is set up with")


class FileObject(OpenAIAnswer):
    id: str = Field(description="file-<the dataset version's sha256>")
    object: Literal["file"] = Field(description="Always file")
    bytes: int = Field(description="Bytes of the registered rows")
    created_at: int = Field(description="When the version was registered, Unix seconds")
    filename: str = Field(description="The dataset version it is: NS/NAME:vN")
    purpose: Literal["fine-tune"] = Field(description="Always fine-tune")
    status: Literal["processed"] = Field(description="Always processed: the rows were checked as they registered")
    expires_at: int | None = Field(default=None, description="Always null: registry versions are kept")
    status_details: str | None = Field(default=None, description="Always null")


class FileList(OpenAIAnswer):
    object: Literal["list"] = Field(description="Always list")
    data: list[FileObject] = Field(description="Newest first")
    has_more: bool = Field(description="Whether older files follow (ask again with after=the last id)")
    first_id: str | None = Field(description="The first file's id")
    last_id: str | None = Field(description="The last file's id")


class JobError(OpenAIAnswer):
    code: str = Field(description="Always run_failed")
    message: str = Field(description="Why the run failed")
    param: str | None = Field(description="Always null")


class JobHyperparameters(OpenAIAnswer):
    n_epochs: int = Field(description="Passes over the training rows")
    batch_size: int = Field(description="Rows a batch")
    learning_rate_multiplier: float = Field(description="The run's learning rate over the plan's default")
    beta: float | None = Field(default=None, description="DPO beta (dpo jobs)")


class JobMethodPart(OpenAIAnswer):
    hyperparameters: JobHyperparameters = Field(description="What the run trains with")


class JobMethod(OpenAIAnswer):
    type: Literal["supervised", "dpo", "reinforcement"] = Field(description="sft runs are supervised, grpo and gspo "
                                                                            "reinforcement")
    supervised: JobMethodPart | None = Field(default=None, description="A supervised job's hyperparameters")
    dpo: JobMethodPart | None = Field(default=None, description="A dpo job's hyperparameters")
    reinforcement: JobMethodPart | None = Field(default=None, description="A reinforcement job's hyperparameters")


class FineTuningJob(OpenAIAnswer):
    id: str = Field(description="ftjob-<the run's id>")
    object: Literal["fine_tuning.job"] = Field(description="Always fine_tuning.job")
    created_at: int = Field(description="When the run was submitted, Unix seconds")
    error: JobError | None = Field(description="Why it failed; null unless failed")
    fine_tuned_model: str | None = Field(description="ft:NS/NAME:vN, the registered model a chat request names; "
                                                     "null until succeeded")
    finished_at: int | None = Field(description="When it ended, Unix seconds")
    hyperparameters: JobHyperparameters = Field(description="What the run trains with")
    model: str = Field(description="The base model")
    organization_id: str = Field(description="The project it counts for")
    result_files: list[str] = Field(description="Always empty: metrics are read with list_events")
    seed: int = Field(description="The run's seed")
    status: Literal["validating_files", "queued", "running", "succeeded", "failed", "cancelled", "paused"] = Field(
        description="queued, running, paused, succeeded, failed or cancelled, from the run's phase")
    trained_tokens: int | None = Field(description="Always null")
    training_file: str = Field(description="The training file's id")
    validation_file: str | None = Field(description="The validation file's id")
    estimated_finish: int | None = Field(description="Always null")
    integrations: list[Any] | None = Field(description="Always null")
    metadata: dict[str, str] | None = Field(description="Always null")
    method: JobMethod = Field(description="supervised, dpo or reinforcement, with its hyperparameters")


class FineTuningJobList(OpenAIAnswer):
    object: Literal["list"] = Field(description="Always list")
    data: list[FineTuningJob] = Field(description="Newest first")
    has_more: bool = Field(description="Whether older jobs follow (ask again with after=the last id)")


class JobEvent(OpenAIAnswer):
    id: str = Field(description="ftevent-<the event's number>")
    object: Literal["fine_tuning.job.event"] = Field(description="Always fine_tuning.job.event")
    created_at: int = Field(description="When it happened, Unix seconds")
    level: Literal["info", "warn", "error"] = Field(description="error for a failure, warn for a warning")
    message: str = Field(description="What happened")
    type: Literal["message", "metrics"] = Field(description="metrics for a step's figures, else message")
    data: dict[str, Any] | None = Field(description="A metrics event's step and figures")


class JobEventList(OpenAIAnswer):
    object: Literal["list"] = Field(description="Always list")
    data: list[JobEvent] = Field(description="Newest first")
    has_more: bool = Field(description="Whether older events follow (ask again with after=the last id)")


class CheckpointMetrics(OpenAIAnswer):
    step: float = Field(description="The update it was saved at")
    train_loss: float | None = Field(description="The training loss logged at that update")
    valid_loss: float | None = Field(description="The validation loss logged at that update")


class JobCheckpoint(OpenAIAnswer):
    id: str = Field(description="ftckpt-<the snapshot's id>")
    object: Literal["fine_tuning.job.checkpoint"] = Field(description="Always fine_tuning.job.checkpoint")
    created_at: int = Field(description="When it was saved, Unix seconds")
    fine_tuned_model_checkpoint: str = Field(description="ft:NS/NAME:vN where it is registered, else the snapshot's "
                                                         "id (register it with akka training snapshots register)")
    fine_tuning_job_id: str = Field(description="The job's id")
    metrics: CheckpointMetrics = Field(description="The figures logged at its step")
    step_number: int = Field(description="The update it was saved at")


class JobCheckpointList(OpenAIAnswer):
    object: Literal["list"] = Field(description="Always list")
    data: list[JobCheckpoint] = Field(description="Newest first")
    has_more: bool = Field(description="Whether older checkpoints follow (ask again with after=the last id)")
    first_id: str | None = Field(description="The first checkpoint's id")
    last_id: str | None = Field(description="The last checkpoint's id")
