"""Training runs: `/v1/training/runs` (submit, dry run, read, annotate, list, metrics, rollouts, snapshots, pause,
resume, cancel), their branches (`…/branch|continue|sweep`, `…/branches`, `…/ancestry`) and `/v1/training/snapshots`."""

from __future__ import annotations

import itertools
import math
from typing import Annotated, Any, ClassVar, Literal, Self, get_args

from pydantic import ConfigDict, Field, PlainValidator, model_validator

from optimize.core.errors import Invalid, Refused
from optimize.schemas.analyses import EstimateScale
from optimize.schemas.common import Answer, BaseModelPin, DatasetPin, Number
from optimize.schemas.plans import MOST_STEPS
from optimize.schemas.progress import Count
from optimize.schemas.requests import Refusal, RequestModel

# --- requests ----------------------------------------------------------------------------------------------
# The plan `POST /v1/training/runs` takes is `optimize.schemas.plans.RunPlan`. The routes below read their body as
# sent and refuse a bad one in their own words; these models document what they accept.

RestoreMode = Literal["auto", "weights", "trainingState"]
RESTORE_MODE = ("auto (the default): trainingState where the branch keeps the snapshot's method, data and settings "
                "and the snapshot holds its training state, else weights; weights: a fresh optimizer on the "
                "snapshot's adapter; trainingState: the snapshot's optimizer, random state and data position too, "
                "refused where it cannot be honoured")
OVERRIDES = ("A partial config document over the parent's resolved settings, e.g. "
             '{"hyperparams": {"optimizer": {"learningRate": 5e-05}}}; what it leaves out is inherited')


_CHECKPOINT = Refusal("checkpoint {value!r} is not one of latest, save",
                      hint="pause with --checkpoint latest (stop against the newest resumable save) or --checkpoint "
                           "save (save at the next update, then stop)")


class PauseRequest(RequestModel):
    """`POST /v1/training/runs/{id}/pause`."""

    not_an_object: ClassVar[Refusal] = _CHECKPOINT

    checkpoint: Annotated[Literal["latest", "save"], _CHECKPOINT] = Field(
        description="latest: stop against the newest save holding the run's training state, discarding the updates "
                    "since; save: save at the next update, then stop")


def _text(name: str) -> Refusal:
    return Refusal(f"{name} must be a non-empty string, not {{shown}}")


def _updates(name: str, missing: str | None = None) -> Refusal:
    return Refusal(f"{name} must be a positive integer of at most {MOST_STEPS:,}", missing=missing)


_OVERRIDES = Refusal("the overrides must be one mapping: a partial config document")
# the restore mode is checked against the snapshot by the branch (its words name the modes); documented as their enum
_MODES = {"enum": list(get_args(RestoreMode))}


class _BranchBody(RequestModel):
    """What the branch routes share: the body may be left out, is one JSON object, and names known fields only."""

    model_config = ConfigDict(extra="forbid")
    may_be_left_out: ClassVar[bool] = True
    not_an_object: ClassVar[Refusal] = Refusal("the request body must be one JSON object")
    unknown_fields: ClassVar[Refusal] = Refusal("unknown field(s) {names}; the fields are {fields}")


class BranchRequest(_BranchBody):
    """`POST /v1/training/runs/{id}/branch[?dryRun=true]`: a child run from one of the parent's snapshots (the body
    may be left out); an unknown field is refused."""

    snapshot_id: Annotated[str | None, _text("snapshotId")] = Field(
        default=None, pattern=r"\S", description="The parent's snapshot to start from, by id or unambiguous prefix "
                                                 "(default: its newest one holding what the restore mode needs)")
    restore_mode: Annotated[str, _text("restoreMode")] = Field(
        default="auto", pattern=r"\S", json_schema_extra=_MODES, description=RESTORE_MODE)
    max_steps: Annotated[int | None, _updates("maxSteps")] = Field(
        default=None, ge=1, le=MOST_STEPS, description="The branch's length in updates (not with epochs, nor with a "
                                                       "length in the overrides)")
    epochs: Annotated[int | None, _updates("epochs")] = Field(
        default=None, ge=1, le=MOST_STEPS, description="The branch's length in passes over its data (not with "
                                                       "maxSteps, nor with a length in the overrides)")
    overrides: Annotated[dict[str, Any] | None, _OVERRIDES] = Field(
        default=None, description=OVERRIDES + "; it may not change hyperparams.lora")


class ContinueRequest(_BranchBody):
    """`POST /v1/training/runs/{id}/continue[?dryRun=true]`: a trainingState branch of `steps` more updates; an
    unknown field is refused."""

    steps: Annotated[int, _updates("steps", missing="a continuation needs steps: how many more updates it trains")] = (
        Field(ge=1, le=MOST_STEPS, description="How many more updates the continuation trains (its schedule spans "
                                               "them)"))
    snapshot_id: Annotated[str | None, _text("snapshotId")] = Field(
        default=None, pattern=r"\S", description="The parent's snapshot to continue from, by id or unambiguous "
                                                 "prefix (default: its newest one holding its training state)")
    overrides: Annotated[dict[str, Any] | None, _OVERRIDES] = Field(
        default=None, description=OVERRIDES + "; a continuation accepts only hyperparams.optimizer.learningRate and "
                                              "hyperparams.training.validationFrequencySteps")


MAX_SWEEP_POINTS = 50
MAX_AXIS_PATH_PARTS = 32  # a config document's fields lie a few levels deep


class SweepAxis(RequestModel):
    path: str = Field(description="A dotted path in the config document, e.g. hyperparams.optimizer.learningRate; "
                                  "two axes may not name the same or nested paths")
    values: list[Any] = Field(min_length=1, description="The values the path takes, in order, with their JSON types")


class SweepGrid(RequestModel):
    """A sweep's grid. Its rules (`read`) count its points and compare its paths before any point is built: a few
    dozen two-valued axes (a body of a few KiB) make billions of points."""

    axes: list[SweepAxis] = Field(min_length=1, description="The grid's axes: one branch per point of their "
                                                            "cartesian product (the last axis varies fastest), at "
                                                            f"most {MAX_SWEEP_POINTS} points")

    @classmethod
    def read(cls, grid: Any) -> Self:
        """The grid as sent, checked: refused by the first axis that is not a path and a list of values, a path of
        more than MAX_AXIS_PATH_PARTS parts, more than MAX_SWEEP_POINTS points, or two axes naming the same or nested
        paths."""
        axes = grid.get("axes") if isinstance(grid, dict) else None
        if not isinstance(axes, list) or not axes:
            raise Invalid("the grid needs axes: a list of {path, values}")
        read: list[SweepAxis] = []
        for number, axis in enumerate(axes, 1):
            if not isinstance(axis, dict) or not isinstance(axis.get("path"), str) or not isinstance(
                    axis.get("values"), list):
                raise Invalid(f"axis {number} needs a path (text) and values (a list)")
            if not axis["values"]:
                raise Invalid(f"axis {number} ({axis['path']}) has no values")
            # each part is a level of the point's document, and the checks that follow walk it level by level
            parts = axis["path"].count(".") + 1
            if parts > MAX_AXIS_PATH_PARTS:
                raise Invalid(f"axis {number}'s path has {parts} dotted parts, more than {MAX_AXIS_PATH_PARTS}",
                              hint="name a field of the config document, e.g. hyperparams.optimizer.learningRate")
            read.append(SweepAxis.model_construct(path=axis["path"], values=axis["values"]))
        count = math.prod(len(axis.values) for axis in read)  # counted before any point is built
        if count > MAX_SWEEP_POINTS:
            raise Refused(f"the grid makes {count} points, more than {MAX_SWEEP_POINTS}", hint="remove values or axes")
        _refuse_overlapping([axis.path for axis in read])
        return cls.model_construct(axes=read)

    def points(self) -> list[dict[str, Any]]:
        """The grid's cartesian product as override documents (last axis fastest)."""
        points = []
        for values in itertools.product(*(axis.values for axis in self.axes)):
            point: dict[str, Any] = {}
            for axis, value in zip(self.axes, values, strict=True):
                node = point
                *parents, last = axis.path.split(".")
                for key in parents:
                    node = node.setdefault(key, {})
                node[last] = value
            points.append(point)
        return points


def _refuse_overlapping(paths: list[str]) -> None:
    """Two axes naming the same or nested paths, in time linear in the paths' length (a grid of one-valued axes
    may list tens of thousands of them: comparing every pair took minutes)."""
    whole: dict[str, str] = {}  # each path so far
    prefixes: dict[str, str] = {}  # each proper dotted prefix of the paths so far -> that path
    for path in paths:
        parts = path.split(".")
        above = [".".join(parts[:end]) for end in range(1, len(parts))]
        other = whole.get(path) or prefixes.get(path) or next((whole[p] for p in above if p in whole), None)
        if other is not None:
            raise Invalid(f"axes {path} and {other} name the same or nested paths")
        whole[path] = path
        for prefix in above:
            prefixes.setdefault(prefix, path)


class SweepRequest(_BranchBody):
    """`POST /v1/training/runs/{id}/sweep[?dryRun=true]`: one branch per grid point, every point checked before any
    is submitted; an unknown field is refused."""

    snapshot_id: Annotated[str | None, _text("snapshotId")] = Field(
        default=None, pattern=r"\S", description="The parent's snapshot every point starts from, by id or "
                                                 "unambiguous prefix (default: its newest one holding what the restore "
                                                 "mode needs)")
    restore_mode: Annotated[str, _text("restoreMode")] = Field(
        default="auto", pattern=r"\S", json_schema_extra=_MODES, description=RESTORE_MODE)
    # read as sent, then by the grid's own rules once the other fields are read (`_read_grid`), so a bad snapshotId
    # or restoreMode is refused first, as the fields come
    grid: Annotated[Any, PlainValidator(lambda value: value, json_schema_input_type=SweepGrid)] = Field(
        default=None, description="The grid: each point is an overrides document")

    @model_validator(mode="after")
    def _read_grid(self) -> Self:
        self.grid = SweepGrid.read(self.grid)
        return self
class RegisterSnapshotRequest(RequestModel):
    """`POST /v1/training/snapshots/{id}/register` (the body may be left out)."""

    may_be_left_out: ClassVar[bool] = True

    name: Annotated[str | None, Refusal("name must be a string")] = Field(
        default=None, description="Name of the registered model in the run's project namespace (default: the run's "
                                  "modelName)")


class PinRequest(RequestModel):
    """`POST /v1/training/snapshots/{id}/pin` and `…/unpin` (the body may be left out): all or nothing, and
    idempotent."""

    may_be_left_out: ClassVar[bool] = True

    kinds: Annotated[list[Annotated[str, Refusal("kinds must be a list of kind names",
                                                 hint="kinds: weights, trainingState")]] | None,
                     Refusal("kinds must be a list")] = Field(
        default=None, description="The kinds to pin or unpin, weights and trainingState (default: every kind the "
                                  "snapshot holds)")


MAX_RUN_DESCRIPTION = 2000
MAX_CONFIG_NAME = 64  # as the plan's configName


class RunAnnotation(RequestModel):
    """`PATCH /v1/training/runs/{id}`: the run's notes. A field left out (or null) stays as it is, an empty string
    clears it; a body naming neither is refused by the service (400). An unknown field is refused."""

    model_config = ConfigDict(extra="forbid")
    not_an_object: ClassVar[Refusal] = Refusal("the request body must be one JSON object: {{description?, "
                                                "configName?}}")  # braces doubled: the words are a format string
    unknown_fields: ClassVar[Refusal] = Refusal("unknown field(s) {names}; the fields are {fields}")

    description: Annotated[str | None, Refusal(
        f"description must be a string of at most {MAX_RUN_DESCRIPTION:,} characters, not {{shown}}")] = Field(
        default=None, max_length=MAX_RUN_DESCRIPTION, description="The run's description, shown by runs get and "
                                                                  "runs list; an empty string clears it")
    config_name: Annotated[str | None, Refusal(
        f"configName must be a string of at most {MAX_CONFIG_NAME} characters, not {{shown}}")] = Field(
        default=None, max_length=MAX_CONFIG_NAME, description="The run's column in its project's scores tables; an "
                                                              "empty string clears it (the column is then the model "
                                                              "name and the config hash)")


# --- answers ------------------------------------------------------------------------------------------------


class ValidationPin(Answer):
    reference: str = Field(description="The validation dataset version, frozen at submission: NS/NAME:vN")
    digest: str = Field(description="The version's digest")


class RunExecution(Answer):
    device_profile: str = Field(description="Device profile the run trains on")
    devices: int = Field(description="Devices the run needs")
    devices_held: list[str] = Field(description="Devices its current attempt holds (empty when none)")
    max_attempts: int | None = Field(default=None, description="Attempts it gets before it fails "
                                                               "(execution.maxAttempts)")
    sharding: str | None = Field(default=None, description="How it splits its work across its devices: ddp or fsdp "
                                                         "(execution.sharding); null on one device")


class RunTiming(Answer):
    phase_millis: dict[str, int] = Field(description="Milliseconds spent in each phase (an open phase counts to now)")
    created_at: str = Field(description="When it was submitted (ISO 8601, UTC)")
    finished_at: str | None = Field(description="When it ended (ISO 8601, UTC); null while it has not")
    preparing: dict[str, Number | None] | None = Field(
        default=None, description="Seconds of PREPARING's parts in the latest attempt, as its worker measured them: "
                                  "workerStart (the process's start to its spec), imports (the engine's, where the "
                                  "worker did not start with them), downloads (saves, bundles, judge "
                                  "adapters), rows (read and rendered), smoke, modelLoad (what was left of the "
                                  "engine's imports and the model's load once the rows were ready), modelLoadAhead "
                                  "(their whole "
                                  "time, on a thread beside the rows), trainer (the adapter and the datasets) and "
                                  "startCheck; null before the worker reports them")


class SnapshotArtifact(Answer):
    kind: str = Field(description="weights or trainingState")
    manifest_digest: str = Field(description="sha256:HEX of the manifest listing the artifact's files")
    size_bytes: int = Field(alias="bytes", description="Total size of its files, bytes")
    files: list[str] | None = Field(default=None, description="Paths of its files")


class BranchRecord(Answer):
    """Where a branch starts: its parent's snapshot and how it restores it; or, for a run with `source.model`, the
    registered adapter it starts from (no parent run or snapshot)."""

    parent_run_id: str | None = Field(description="The run branched from; null for a run from source.model")
    snapshot_id: str | None = Field(description="The parent's snapshot it starts from; null for a run from "
                                                "source.model")
    step: int = Field(description="The snapshot's step")
    restore: str = Field(description="trainingState (optimizer, RNG and data position kept) or weights")
    why: str = Field(description="Why that restore mode")
    requested: str = Field(description="The restore mode asked for: auto, weights or trainingState")
    artifacts: list[SnapshotArtifact] | None = Field(default=None, description="The snapshot's artifacts the branch "
                                                                               "restores (dry runs only)")
    source: dict[str, Any] | None = Field(default=None, description="A run from source.model: {model}, the exact "
                                                                    "adapter version it trains")


class RunSetting(Answer):
    value: Any = Field(description="The resolved value")
    source: str = Field(description="file (the plan stated it) or where the default came from")


class Packing(Answer):
    """How a packed run's rows fill its bins of maxSeqLength tokens."""

    rows: int = Field(description="The rows packed")
    bins: int | None = Field(description="The bins they fill (updates are made over these); null before an "
                                         "analysis measured the rows")
    bin_tokens: int = Field(alias="binTokens", description="A bin's size: maxSeqLength")
    tokens: int | None = Field(description="The rows' own tokens")
    efficiency: Number | None = Field(description="The rows' tokens over the bins' tokens (1: no room left)")


class RunPrediction(Answer):
    """The pre-flight estimate of a run (from its dataset analysis and the catalog's measured throughput) and the
    training time measured against it."""

    seconds: Number | None = Field(description="Training seconds estimated; null when there is no estimate")
    steps: int | None = Field(description="Updates the estimate counts")
    tokens: int | None = Field(description="Tokens the estimate counts")
    basis: str = Field(description="What the estimate rests on, or why there is none")
    analysis_id: str | None = Field(description="The analysis of the training dataset it was computed from")
    recorded_at: str = Field(description="When it was recorded (ISO 8601, UTC)")
    actual_seconds: Number | None = Field(description="Training seconds measured so far (the TRAINING phase); null "
                                                      "before training")
    unscaled_seconds: Number | None = Field(default=None, description="The catalog's figure before `scale`; "
                                                                      "null when there is no estimate")
    scale: EstimateScale | None = Field(default=None, description="What `seconds` was scaled by: this deployment's "
                                                                  "runs of the same shape; null when unscaled")
    packing: Packing | None = Field(default=None, description="A packed run's bins as its analysis' lengths fill "
                                                              "them; null for a run that does not pack")


class MemoryParts(Answer):
    """The predicted peak device memory and what it is made of (GiB per device)."""

    peak_gi_b: Number = Field(alias="peakGiB", description="The predicted peak, GiB per device")
    weights_gi_b: Number = Field(alias="weightsGiB", description="The base model's weights at the run's precision")
    adapter_state_gi_b: Number = Field(alias="adapterStateGiB", description="The adapter's fp32 weights, gradients and "
                                                                           "Adam moments")
    activations_gi_b: Number = Field(alias="activationsGiB", description="What one micro-batch keeps for its "
                                                                         "backward pass, logits included")
    tokens_per_pass: int = Field(description="Tokens one micro-batch forwards (sequences x maxSeqLength)")
    gradient_checkpointing: bool = Field(description="Whether the estimate recomputes activations")
    shards: int = Field(default=1, description="The devices the weights and the adapter state are sharded over "
                                              "(fsdp); 1: a whole copy on each device")
    generation_gi_b: Number | None = Field(default=None, alias="generationGiB",
                                           description="While a colocated vLLM generates a reinforcement run's "
                                                       "rollouts: the weights and adapter state with vLLM's share of "
                                                       "the device; null where no engine generates beside the model")


class RunMemory(Answer):
    """Peak device memory: predicted at admission (`training.admission.memory`) against measured by the worker."""

    predicted: MemoryParts | None = Field(description="The estimate; null where the catalog gives no shape")
    basis: str = Field(description="What the estimate rests on, or why there is none")
    device_memory_gi_b: Number | None = Field(default=None, alias="deviceMemoryGiB",
                                              description="Memory per device of the run's profile, where known")
    checkpointing_reason: str | None = Field(description="Why gradient checkpointing was resolved as it was, where "
                                                         "the estimate chose it")
    sharding_reason: str | None = Field(default=None, description="Why execution.sharding was resolved as it was, "
                                                                "where the estimate chose it")
    measured_gi_b: Number | None = Field(alias="measuredGiB", description="The training peak measured (allocated, "
                                                                         "after the start checks); null on the cpu or "
                                                                         "before the run ends")
    reserved_gi_b: Number | None = Field(alias="reservedGiB", description="The allocator's reserved peak in training")
    start_check_gi_b: Number | None = Field(alias="startCheckGiB", description="The peak during the start checks "
                                                                             "(a second copy of the model)")
    ratio: Number | None = Field(description="measured / predicted; null until both are known")


class GuardFinding(Answer):
    """What a reinforcement run's guards found on a window of its updates (`training.server.guards`)."""

    kind: str = Field(description="rewardDrop or klHigh (warnings); rewardDropBelow or klAbove (execution.stopWhen "
                                  "met)")
    step: int = Field(description="The newest update judged: where it was first met")
    window: list[int] = Field(description="The first and last update of the window judged")
    value: Number = Field(description="The window's mean reward (or KL)")
    bound: Number = Field(description="The figure it crossed: the reward below which it warns or stops, the KL above "
                                      "which it does")
    anchor: dict[str, Any] | None = Field(default=None, description="A reward drop: the first window's updates and "
                                                                    "mean reward ({window, reward})")
    message: str = Field(description="What was found, in one sentence")
    at: str = Field(description="When it was recorded (ISO 8601, UTC)")


class RunGuards(Answer):
    """A reinforcement run's guards: warnings when its mean reward falls well below its first window's or its KL
    grows past a bound, and the stop `execution.stopWhen` asked for."""

    window: int | None = Field(description="Updates a window holds (a tenth of the run, 3 to 10); null before the "
                                           "first update")
    anchor: dict[str, Any] | None = Field(description="The first window's updates, mean reward and spread ({window, "
                                                      "reward, spread}); null until it is in")
    warnings: list[GuardFinding] = Field(description="Each kind of warning, once: when it was first met")
    stop: GuardFinding | None = Field(description="The stop execution.stopWhen asked for (the run saves at its next "
                                                  "update and completes there); null when none")


class Run(Answer):
    """A training run as users see it."""

    run_id: str = Field(description="The run's id")
    submission_id: str = Field(description="The plan's submissionId (generated when the plan had none)")
    project: str = Field(description="Training project")
    method: str = Field(description="Training method, e.g. sft or dpo")
    phase: str = Field(description="QUEUED, PREPARING, TRAINING, PAUSING, PAUSED, COMPLETED, FAILED or CANCELLED")
    attempt: int = Field(description="Attempts started (0 while it waits for its first)")
    base_model: BaseModelPin = Field(description="The base model and commit it trains")
    dataset: DatasetPin = Field(description="The training dataset version")
    validation: ValidationPin | None = Field(description="The validation dataset version; null when none")
    model_name: str = Field(description="The model name the trained adapter is registered under")
    execution: RunExecution = Field(description="Where it runs")
    config_hash: str = Field(description="Hash of the resolved config: runs with the same hash train the same way")
    progress: dict[str, Any] = Field(description="What its worker reported: rows, observed step, total steps, loss")
    count: Count | None = Field(default=None, description="How far it is: rows prepared or steps, done of total "
                                                          "(the same words for every kind); null before either")
    saved_step: int | None = Field(description="The newest step saved with its training state; null before any")
    checks: dict[str, Any] | None = Field(description="The pre-training checks of the rendered rows; null before them")
    length_check: dict[str, Any] | None = Field(description="The length and template check before the run claims "
                                                            "a device: its status (passed, waiting, notRun, refused) "
                                                            "and the analysis each dataset was checked against")
    results: dict[str, Any] = Field(description="What it produced: model (the registered version, null until then), "
                                                "dataFit and the final metrics")
    cost: dict[str, Any] = Field(description="deviceSeconds (estimate: true while it runs) and duration by phase")
    timing: RunTiming = Field(description="Time in each phase, submission and end")
    prediction: RunPrediction | None = Field(default=None, description="The pre-flight estimate recorded before "
                                                                       "its devices were claimed, with the training "
                                                                       "time measured; null until it is recorded")
    memory: RunMemory | None = Field(default=None, description="Peak device memory predicted against measured; "
                                                               "null for runs admitted before it was predicted")
    failure_reason: str | None = Field(description="Why it failed; null unless FAILED")
    warnings: list[str] = Field(description="What admission noted, e.g. an unmeasured envelope; then what the run's "
                                            "guards found as it trained (guards)")
    guards: RunGuards | None = Field(default=None, description="A reinforcement run's guards on its reward and KL; "
                                                               "null for other methods")
    description: str | None = Field(description="The plan's description, or what annotating the run set")
    config_name: str | None = Field(default=None, description="The run's column in its project's scores tables "
                                                              "(the plan's configName, or what annotating the run "
                                                              "set); null: the model name and the config hash")
    pause: dict[str, Any] | None = Field(description="The current attempt's pause: checkpoint, state, saved step, "
                                                     "whether its devices are released; null when none")
    resumed: dict[str, Any] | None = Field(description="What the latest resume restored, and the pause it ended")
    parent_run_id: str | None = Field(description="The run it branched from; null unless a branch")
    branch: BranchRecord | None = Field(description="Where the branch starts; null unless a branch")
    pipeline: dict[str, str] | None = Field(default=None, description="The pipeline and stage it trains for: "
                                                                      "{pipelineId, stage}; null unless a stage's run")
    terminal: bool = Field(description="Whether it has ended (COMPLETED, FAILED or CANCELLED)")
    settled: bool = Field(description="Whether nothing changes until a user acts (ended or PAUSED)")
    waiting_for: str | None = Field(default=None, description="What a QUEUED run waits for, in words; null "
                                                              "otherwise (one run's answer and its events)")
    settings: dict[str, RunSetting] | None = Field(default=None, description="Every setting's resolved value and "
                                                                             "source, by path (with settings=true)")


class RunListItem(Run):
    project_archived: bool = Field(description="Whether the run's project is archived")


class RunList(Answer):
    runs: list[RunListItem] = Field(description="Runs, newest first (at most 500)")


class MetricPoint(Answer):
    """One logged step; its values (loss, learningRate, …) are keys of their own, named as the trainer logs them
    (`core.tracker_names`), so this answer alone takes keys it does not declare."""

    model_config = ConfigDict(extra="allow")

    step: int = Field(description="The update the values are for")
    kind: str = Field(description="train or validation")
    attempt: int = Field(description="The attempt that logged it")
    at: str = Field(description="When it was logged (ISO 8601, UTC)")


class RunMetrics(Answer):
    run_id: str = Field(description="The run's id")
    steps: list[MetricPoint] = Field(description="Training steps in order (the newest `limit` with ?limit=)")
    validation: list[MetricPoint] = Field(description="Validation passes in order")


class ComparedRun(Answer):
    """One side of a loss comparison: what the run has logged so far."""

    run_id: str = Field(description="The run's id")
    phase: str = Field(description="Its phase now (a running run is compared on what it has logged so far)")
    project: str = Field(description="Its project")
    updates: int = Field(description="How many updates logged a training loss")
    last_step: int = Field(description="The newest update with a logged loss")
    tokens: int | None = Field(default=None, description="Tokens seen by its newest logged update (with align=tokens)")
    median_grad_norm: float | None = Field(description="The median of its logged pre-clip gradient norms (null when "
                                                       "it logged none)")


class LossWindow(Answer):
    """One window of the comparison: both runs' mean training loss over the same updates (or the same tokens)."""

    window: int = Field(description="The window's number, from 1")
    run_steps: list[int] = Field(description="The first and last update of RUN in the window")
    baseline_steps: list[int] = Field(description="The first and last update of BASELINE in the window")
    tokens: list[int] | None = Field(default=None, description="align=tokens: the tokens seen the window spans "
                                                               "(after the first, up to the last)")
    run_loss: float = Field(description="RUN's mean training loss over the window")
    baseline_loss: float = Field(description="BASELINE's mean training loss over the window")
    difference: float = Field(description="run loss − baseline loss: below zero, RUN's loss is lower")
    updates: int = Field(description="How many of RUN's updates the window holds (its weight in the mean)")


class GradientSpike(Answer):
    """An update whose pre-clip gradient norm is at least spikeFactor × its run's median."""

    run: Literal["run", "baseline"] = Field(description="Which of the two runs")
    run_id: str = Field(description="That run's id")
    step: int = Field(description="The update")
    grad_norm: float = Field(description="Its pre-clip gradient norm")
    median: float = Field(description="The run's median gradient norm")
    ratio: float = Field(description="gradNorm / median")


class BeyondMargin(Answer):
    """The first window whose difference is beyond the margin, in either direction."""

    window: int = Field(description="The window's number")
    run_steps: list[int] = Field(description="The first and last update of RUN in it")
    difference: float = Field(description="Its difference (run − baseline)")
    direction: Literal["better", "worse"] = Field(description="better: RUN's loss lower; worse: higher")


class HparamDifference(Answer):
    path: str = Field(description="The hyperparameter's dotted path, e.g. config.hyperparams.optimizer.learningRate")
    value: Any = Field(description="This run's value (null: it has none)")
    against: Any = Field(description="The other run's value (null: it has none)")


class RunHparams(Answer):
    """`GET /v1/training/runs/{id}/hparams[?against=]`."""

    run_id: str = Field(description="The run")
    sha: str = Field(description="sha256 of its flattened hyperparameters: equal for runs that train alike")
    hyperparams: dict[str, Any] = Field(description="Every leaf of its resolved config but the datasets, by path")
    against: str | None = Field(default=None, description="The run it is compared with")
    against_sha: str | None = Field(default=None, description="That run's sha")
    differences: list[HparamDifference] | None = Field(default=None, description="The paths whose values differ")


class LossComparison(Answer):
    """`GET /v1/training/runs/{id}/compare?baseline=ID`: two supervised runs' training losses, window by window."""

    run: ComparedRun = Field(description="RUN")
    baseline: ComparedRun = Field(description="BASELINE")
    align: Literal["step", "tokens"] = Field(description="How the windows line up: by update or by tokens seen")
    window: int = Field(description="Updates per window (BASELINE's, with align=tokens)")
    spike_factor: Number = Field(description="A gradient spike is a norm at least this many times the run's median")
    margin: Number = Field(description="The absolute loss difference a window must pass to count as different")
    across_plans: bool = Field(description="Whether the runs' plans differ in more than hyperparams and execution")
    plan_differences: list[str] = Field(description="What differs between the plans beyond hyperparams and "
                                                    "execution (empty for runs of one plan)")
    windows: list[LossWindow] = Field(description="The windows both runs reached, in order")
    windows_compared: int = Field(description="How many windows were compared")
    mean_difference: float = Field(description="The mean difference over the windows, weighted by their updates")
    first_beyond_margin: BeyondMargin | None = Field(description="The first window beyond the margin (null: none)")
    spikes: list[GradientSpike] = Field(description="Gradient spikes of either run, in order of run then update")
    verdict: Literal["better", "worse", "same"] = Field(
        description="RUN against BASELINE over the windows compared: better or worse when the mean difference is "
                    "beyond the margin (below or above), else same")


class RolloutItem(Answer):
    """One sampled completion of an update, with what each reward term scored it."""

    group: int | None = Field(default=None, description="Which of the update's recorded prompt groups it belongs "
                                                         "to (0-based): completions of one prompt share a group")
    prompt: str = Field(description="The prompt's last user message (at most 2000 characters)")
    completion: str = Field(description="The completion's text (at most 2000 characters)")
    scores: dict[str, float | None] = Field(description="Each reward term's score, by term name; null where the term "
                                                        "did not apply or could not score it")
    total: float | None = Field(description="The weighted sum of the terms' scores (terms without a score left out; "
                                            "null when none scored)")
    errors: dict[str, str] | None = Field(default=None, description="A scoring bundle's error text, by term name, "
                                                                    "where a term failed on this completion")
    cut: list[str] | None = Field(default=None, description="Which texts (prompt, completion) were cut to 2000 "
                                                            "characters, ending in …")


class RolloutTerm(Answer):
    name: str = Field(description="The reward term's name")
    weight: Number = Field(description="Its weight in the total")


class RunRollouts(Answer):
    """A reinforcement run's recorded rollouts at one update: a bounded sample (the first prompt groups, every
    completion of each, at most 16)."""

    run_id: str = Field(description="The run's id")
    method: str = Field(description="The run's method: grpo or gspo")
    phase: str = Field(description="The run's phase")
    terms: list[RolloutTerm] = Field(description="The run's reward terms in order, with their weights")
    steps: list[int] = Field(description="The updates with recorded rollouts, in order")
    step: int | None = Field(description="The update shown (default: the newest recorded; null when none is)")
    attempt: int | None = Field(description="The attempt that recorded it")
    recorded_at: str | None = Field(description="When it was recorded (ISO 8601, UTC)")
    items: list[RolloutItem] = Field(description="The update's sampled completions, in rollout order")


class Snapshot(Answer):
    """A committed save of a run: its artifacts and what keeps them from retention."""

    snapshot_id: str = Field(description="The snapshot's id")
    run_id: str = Field(description="The run that saved it")
    attempt: int = Field(description="The attempt that saved it")
    step: int = Field(description="The update it was saved after")
    epoch: Number | None = Field(description="The epoch position it was saved at")
    final: bool = Field(description="Whether it is the run's final save")
    artifacts: list[SnapshotArtifact] = Field(description="Everything it saved")
    kinds: list[str] = Field(description="Artifact kinds it still holds")
    swept: list[str] = Field(description="Kinds retention took off the catalog")
    pinned: list[str] = Field(description="Kinds an operator pinned against retention")
    registered: list[str] = Field(description="Model versions registered from its weights")
    held_by: list[str] = Field(description="What holds it against retention")
    committed_at: str = Field(description="When it was committed (ISO 8601, UTC)")


class SnapshotDetail(Snapshot):
    project: str = Field(description="The run's project")
    model_name: str = Field(description="The run's model name")


class RegisteredSnapshot(Snapshot):
    model: str = Field(description="The model version its weights are registered as: NS/NAME:vN")


class RunSnapshots(Answer):
    run_id: str = Field(description="The run's id")
    snapshots: list[Snapshot] = Field(description="Its snapshots by attempt and step")


class EnvelopeVerdict(Answer):
    status: str = Field(description="measured, or unmeasured when no catalog envelope covers the run")
    mode: str = Field(description="strict or advisory")


class DryRun(Answer):
    """Everything a submission checks, with nothing started."""

    dry_run: bool = Field(description="Always true")
    project: str = Field(description="Training project")
    base_model: BaseModelPin = Field(description="The base model and commit it would train")
    model_name: str = Field(description="The model name the adapter would be registered under")
    config_hash: str = Field(description="Hash of the resolved config")
    resolved: dict[str, Any] = Field(description="config and execution with every default filled in, the source of "
                                                 "each setting (sources) and the Lengths sections (lengths)")
    envelope: EnvelopeVerdict = Field(description="The envelope verdict")
    warnings: list[str] = Field(description="What admission notes")
    length_check: dict[str, Any] = Field(description="The length and template check the run would record")
    diagnostics: list[dict[str, Any]] = Field(description="Each dataset's diagnostics (coverage, lengths, rows)")
    memory: RunMemory | None = Field(default=None, description="The peak device memory predicted per device, and why "
                                                               "gradient checkpointing is what it is")
    reward_check: list[dict[str, Any]] | None = Field(
        default=None, description="A reinforcement run's reward terms scored on the first rows' own answers: per "
                                  "term, rows scored and unscored, mean, spread and the first errors by line")
    source: dict[str, Any] | None = Field(
        default=None, description="A plan with source.model: the adapter version it would train on ({model})")
    estimates: dict[str, Any] | None = Field(
        default=None, description="A reinforcement run's estimate: steps, rollouts (prompts and completions per "
                                  "update, completions, the most tokens they may generate), and tokens and seconds "
                                  "where its dataset's analysis is done and a throughput is measured (basis says)")
    estimate: dict[str, Any] | None = Field(
        default=None, description="A supervised run's pre-flight estimate where its dataset's analysis is done: "
                                  "seconds, steps, tokens, basis (as the run records it)")
    expected_mfu: dict[str, Any] | None = Field(
        default=None, description="The MFU the estimate's tokens/s would reach on the profile's GPU: value, basis (4N "
                                  "a token for LoRA), peakTflops, device; null on the cpu or without an estimate")
    groups_check: dict[str, Any] | None = Field(
        default=None, description="A reinforcement run's reward on the answers a sampling evaluation sampled from the "
                                  "model it starts from on the same dataset version: evaluationId, generations, "
                                  "temperature, prompts, answers, groups, zeroVarianceShare, meanReward; with no such "
                                  "evaluation, evaluationId null and the command that makes one")


class BranchDryRun(DryRun):
    branch: BranchRecord = Field(description="Where the branch would start and how it would restore")


class SweepPoint(Answer):
    overrides: dict[str, Any] = Field(description="The grid point: a partial config document")
    restore: str = Field(description="The restore mode it would take")
    why: str = Field(description="Why that restore mode")


class SweepDryRun(Answer):
    dry_run: bool = Field(description="Always true")
    points: list[SweepPoint] = Field(description="One per grid point, each checked")


class SweepRun(Run):
    overrides: dict[str, Any] = Field(description="The grid point the branch trains")


class Sweep(Answer):
    runs: list[SweepRun] = Field(description="One branch per grid point, in grid order")


class BranchChild(Run):
    depth: int = Field(description="1 for a child, 2 for a grandchild, …")


class Branches(Answer):
    run_id: str = Field(description="The run asked about")
    runs: list[BranchChild] = Field(description="Its branches (with recursive=true, the whole tree, breadth first)")


class AncestryHop(Answer):
    run_id: str = Field(description="A run of the chain")
    phase: str = Field(description="Its phase")
    method: str = Field(description="Its method")
    steps: int | None = Field(description="Its step budget (totalSteps); null before it is known")
    snapshot_id: str | None = Field(default=None, description="The parent's snapshot it starts from (branches only)")
    from_step: int | None = Field(default=None, description="That snapshot's step (branches only)")
    restore: str | None = Field(default=None, description="How it restored it (branches only)")
    source: str | None = Field(default=None, description="The registered adapter a root run started from "
                                                         "(source.model)")


class Ancestry(Answer):
    run_id: str = Field(description="The run asked about")
    chain: list[AncestryHop] = Field(description="From the root run to the run asked about")
