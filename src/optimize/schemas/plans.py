"""The run plan (`kind: run`): a pydantic model with `extra="forbid"`, so an unknown field is refused by its path.

Every field has a description and a default where the product has one. `stated_and_resolved` tells, for every
leaf, its resolved value and whether the plan stated it (`file`) or it came from the defaults (`default`).
The configuration (what determines the trained model) is `config`; `execution` (how it runs) is not part of it.

The plan is shared by the server (admission, analysis estimates), the CLI (reading a run file) and the workers
(the engine), and so is the one rule for how many optimizer updates a plan makes (`steps_per_epoch`,
`TrainingLoop.updates`): the engine trains by it and the estimates predict with it.
"""

from __future__ import annotations

import json
from math import ceil
from typing import Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from optimize.core.errors import Invalid

# Bounds far beyond any real run: a larger number is a typo (1e30), refused by its field path, not a plan.
MOST_STEPS = 10_000_000
MOST_EPOCHS = 10_000
MOST_BATCH = 65_536
MOST_TOKENS = 1_048_576


class _Part(BaseModel):
    # One spelling per key: a field is read by its alias only (`maxSteps`, never `max_steps`: no populate_by_name),
    # so another spelling is an unknown field, refused by `parse_plan` with the camelCase name suggested.
    model_config = ConfigDict(extra="forbid")


class Lora(_Part):
    rank: int = Field(default=8, ge=1, le=1024, description="LoRA rank")
    alpha: float = Field(default=16, gt=0, le=1e6, description="LoRA alpha")
    dropout: float = Field(default=0.05, ge=0, lt=1, description="LoRA dropout")
    targets: str | list[str] = Field(default="all-linear", description="Modules to adapt, or all-linear")
    adapt_experts: bool = Field(default=False, alias="adaptExperts", description="Adapt MoE expert weights")


class Optimizer(_Part):
    learning_rate: float = Field(default=1e-4, gt=0, le=10, alias="learningRate", description="Peak learning rate")
    weight_decay: float = Field(default=0.0, ge=0, le=100, alias="weightDecay", description="AdamW weight decay")


class TrainingLoop(_Part):
    epochs: int = Field(default=1, ge=1, le=MOST_EPOCHS, description="Passes over the training rows")
    max_steps: int | None = Field(default=None, ge=1, le=MOST_STEPS, alias="maxSteps",
                                  description="Stop after this many updates")
    batch_size: int = Field(default=8, ge=1, le=MOST_BATCH, alias="batchSize",
                            description="Sequences per device per pass")
    gradient_accumulation: int = Field(default=1, ge=1, le=MOST_BATCH, alias="gradientAccumulation",
                                       description="Passes per optimizer update")
    warmup_steps: int = Field(default=0, ge=0, le=MOST_STEPS, alias="warmupSteps", description="Linear warmup updates")
    validation_frequency_steps: int | None = Field(default=None, ge=1, le=MOST_STEPS, alias="validationFrequencySteps",
                                                   description="Validate every this many updates")

    def updates(self, rows: int, devices: int = 1) -> int:
        """The optimizer updates this loop makes over `rows` on `devices`."""
        if self.max_steps:
            return self.max_steps
        return steps_per_epoch(rows, self.batch_size, self.gradient_accumulation, devices) * self.epochs


class Hyperparams(_Part):
    lora: Lora = Field(default_factory=Lora, description="The LoRA adapter trained")
    optimizer: Optimizer = Field(default_factory=Optimizer, description="The optimizer's settings")
    training: TrainingLoop = Field(default_factory=TrainingLoop, description="Epochs, steps, batches, validation")


class ModelSettings(_Part):
    precision: Literal["fp32", "bf16", "fp16"] | None = Field(
        default=None, description="Training precision (default: bf16 on GPUs, fp32 on the cpu profile)")
    gradient_checkpointing: bool | None = Field(default=None, alias="gradientCheckpointing",
                                                description="Recompute activations in the backward pass")
    attention_implementation: str | None = Field(default=None, alias="attentionImplementation",
                                                 description="sdpa, eager or flex_attention")
    adapter: Literal["lora", "full", "qlora"] | None = Field(
        default=None, description="What trains: a LoRA adapter (default), every weight (full), or a LoRA adapter "
                                  "on the base quantized to 4 bits (qlora, on a GPU)")


class Data(_Part):
    truncation: Literal["error", "drop", "oldest", "oldest_or_drop", "right"] = Field(
        default="error", description="What happens to a row longer than maxSeqLength")


class Loss(_Part):
    assistant_turns: Literal["final", "all"] = Field(default="final", alias="assistantTurns",
                                                     description="Train the final answer, or every assistant turn")
    train_on_tool_calls: bool = Field(default=True, alias="trainOnToolCalls",
                                      description="Train earlier assistant turns' tool calls under assistantTurns: all")
    explicit_loss_mask_column: str | None = Field(default=None, alias="explicitLossMaskColumn",
                                                  description="Row key holding a 0/1 mask per token")


class Validation(_Part):
    dataset: str | None = Field(default=None, description="Validation dataset reference")


class Preference(_Part):
    beta: float = Field(default=0.1, gt=0, description="DPO beta")
    loss_type: Literal["sigmoid", "ipo"] = Field(default="sigmoid", alias="lossType", description="DPO loss")
    fused_loss: bool | None = Field(default=None, alias="fusedLoss", description="Liger's fused DPO loss")


class RlTraining(TrainingLoop):
    batch_size: int = Field(default=2, ge=1, le=MOST_BATCH, alias="batchSize",
                            description="Prompts per device per pass (each rolled out `generations` times)")


class RlHyperparams(_Part):
    """A reinforcement run's counterpart of `hyperparams`: the adapter, optimizer and loop, and how it rolls out."""

    lora: Lora = Field(default_factory=Lora, description="The LoRA adapter trained")
    optimizer: Optimizer = Field(default_factory=lambda: Optimizer(learningRate=1e-5),
                                 description="The optimizer's settings")
    training: RlTraining = Field(default_factory=RlTraining, description="Epochs, steps, prompts per pass")
    kl_beta: float = Field(default=0.04, ge=0, le=100, alias="klBeta",
                           description="KL penalty against the reference policy (0: none)")
    temperature: float = Field(default=0.7, ge=0, le=10, description="Sampling temperature of the rollouts "
                                                                     "(0: greedy)")
    generations: int = Field(default=4, ge=2, le=1024, description="Completions sampled per prompt (a group)")
    max_completion_length: int = Field(default=128, ge=1, le=MOST_TOKENS, alias="maxCompletionLength",
                                       description="Longest completion, tokens")
    importance_sampling: Literal["token", "sequence"] | None = Field(
        default=None, alias="importanceSampling",
        description="Importance-sampling level of the policy ratio (default: token for grpo, sequence for gspo)")
    rollout_engine: Literal["transformers", "vllm"] | None = Field(
        default=None, alias="rolloutEngine",
        description="What generates the rollouts: vllm (the default on a GPU where it is installed: colocated with "
                    "training, asleep while it updates) or transformers (the cpu's)")


TERM_KINDS = ("exact", "contains", "regex", "jsonFieldMatch", "numeric", "length", "jsonSchema", "rule", "judge")


class RewardTerm(_Part):
    """One term of the reward: a built-in check, a scoring bundle's function (`kind: rule`) or a judge model asked
    to grade each completion (`kind: judge`)."""

    kind: Literal["exact", "contains", "regex", "jsonFieldMatch", "numeric", "length", "jsonSchema", "rule",
                  "judge"] = Field(
        description="exact, contains, regex, jsonFieldMatch, numeric, length, jsonSchema (the answer is JSON a schema "
                    "accepts), rule (a scoring bundle's function), or judge (a model asked to grade each completion)")
    name: str | None = Field(default=None, max_length=64, description="The term's name in metrics (default: kind, "
                                                                      "numbered when repeated)")
    weight: float = Field(default=1.0, ge=-1e6, le=1e6, description="Its weight in the sum")
    field: str | None = Field(default=None, max_length=64,
                              description="Row field holding the reference (default: the row's final answer)")
    pattern: str | None = Field(default=None, max_length=4096,
                                description="regex: the pattern searched for (Python's syntax, matched in linear time: "
                                            "no backreferences or lookaround)")
    case_sensitive: bool | None = Field(default=None, alias="caseSensitive", description="exact, contains")
    tolerance: float | None = Field(default=None, ge=0, description="numeric: absolute tolerance")
    target: int | None = Field(default=None, ge=0, le=MOST_TOKENS, description="length: characters without penalty")
    max: int | None = Field(default=None, ge=1, le=MOST_TOKENS, description="length: characters at penalty -1")
    # left out of the JSON while unset, so a term stated without it keeps the document and configuration hash it had
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema", exclude_if=lambda value: value is None,
                                               description="jsonSchema: the JSON schema an answer must satisfy")
    bundle: str | None = Field(default=None, max_length=300, description="rule: the scoring bundle (NS/NAME[:vN])")
    function: str | None = Field(default=None, max_length=200,
                                 description="rule: MODULE[:FUNCTION] in the bundle (FUNCTION default compute_score)")
    model: str | None = Field(default=None, max_length=300,
                              description="judge: the model that grades (a base model of the catalog, or a registered "
                                          "model NS/NAME[:vN])")
    instructions: str | None = Field(default=None, max_length=8000,
                                     description="judge: its instructions (default: a trained judge's own, else the "
                                                 "built-in grading instructions)")
    clip: tuple[float, float] | None = Field(default=None, description="[low, high] the term's score is clipped to")


class Reward(_Part):
    terms: list[RewardTerm] = Field(min_length=1, max_length=32, description="The reward's terms")
    aggregation: Literal["sum", "normalizeThenSum"] = Field(
        default="sum", description="sum: weighted sum, then normalized per group; normalizeThenSum: each term "
                                   "normalized per group, then summed by weight")


class Smoke(_Part):
    """A smoke check: before the full run, train a slice of the first rows for a few updates, answer the slice's
    prompts with that adapter and score the text answers; the run goes on only when it passes."""

    rows: int = Field(default=16, ge=1, le=10_000, description="Training rows in the slice (the first ones)")
    steps: int = Field(default=4, ge=1, le=10_000, description="Updates trained on the slice")
    grader: Literal["jsonFieldMatch", "exact", "contains"] | None = Field(
        default=None, description="How a supervised run's answers are scored (default jsonFieldMatch); a "
                                  "reinforcement run scores them with its reward terms")
    min_score: float | None = Field(default=None, ge=-1e6, le=1e6, alias="minScore",
                                    description="The mean score the answers must reach (default: none; the check "
                                                "fails when no answer can be scored or the loss is not finite)")


class ReferenceCheck(_Part):
    # The release notes name these bounds checks.reference.mean_logprob_error, max_logprob_error and
    # fp32_max_logprob_error: that is their one spelling (meanLogprobError is refused with it suggested).
    mean_logprob_error: float | None = Field(
        default=None, gt=0, description="Bound on the mean per-token log-probability difference between the engine and "
                                        "plain Transformers at the run's precision (default: 3 x roundingError, at "
                                        "least 0.03)")
    max_logprob_error: float | None = Field(
        default=None, gt=0, description="Bound on the largest difference at the run's precision (default 1.0 up to "
                                        "4096 tokens, growing in proportion to the longer compared conversation)")
    fp32_max_logprob_error: float | None = Field(
        default=None, gt=0, description="Bound on the largest difference at fp32 (default 0.002 up to 4096 tokens, "
                                        "growing in proportion)")


class Checks(_Part):
    reference: ReferenceCheck = Field(default_factory=ReferenceCheck,
                                      description="The reference check before the first update")


class RunConfig(_Part):
    dataset: str = Field(description="Training dataset reference")
    method: Literal["sft", "dpo", "grpo", "gspo"] = Field(default="sft", description="Training method")
    hyperparams: Hyperparams = Field(default_factory=Hyperparams, description="Adapter, optimizer and loop")
    seed: int = Field(default=0, ge=0, le=2**32 - 1, description="Seed for data order, initialization and sampling")
    max_seq_length: int = Field(default=2048, ge=16, le=MOST_TOKENS, alias="maxSeqLength",
                                description="Longest sequence, tokens (within the base model's context)")
    model: ModelSettings = Field(default_factory=ModelSettings, description="How the base model is loaded and run")
    liger: dict[str, bool] = Field(default_factory=dict, description="Liger kernels to turn on or off")
    data: Data = Field(default_factory=Data, description="What happens to rows that do not fit")
    loss: Loss = Field(default_factory=Loss, description="Which tokens are trained")
    validation: Validation = Field(default_factory=Validation, description="The validation dataset")
    preference: Preference = Field(default_factory=Preference, description="Preference (dpo) settings")
    rl_hyperparams: RlHyperparams | None = Field(default=None, alias="rlHyperparams",
                                                 description="Reinforcement (grpo, gspo) adapter, optimizer, loop and "
                                                             "rollouts, instead of hyperparams")
    reward: Reward | None = Field(default=None, description="Reinforcement (grpo, gspo): the reward's terms")
    smoke: Smoke | None = Field(default=None, description="A smoke check before the full run (sft, grpo, gspo)")
    checks: Checks = Field(default_factory=Checks, description="The checks before the first update")
    packing: bool | None = Field(default=None, description="Pack rows into maxSeqLength bins, each row attending only "
                                                           "to itself (sft; left out: on where the attention "
                                                           "implementation reads variable-length rows)")


class StopWhen(_Part):
    """When a reinforcement run stops itself (`training.server.guards`): each bound is judged on the mean of its
    figure over the latest window of updates; the run then saves at its next update and completes there."""

    reward_drop_below: float | None = Field(default=None, allow_inf_nan=False, alias="rewardDropBelow",
                                            description="Stop when the mean reward over the latest window of updates "
                                                        "is below this (an absolute reward)")
    kl_above: float | None = Field(default=None, ge=0, allow_inf_nan=False, alias="klAbove",
                                   description="Stop when the mean KL against the starting policy over the latest "
                                               "window of updates is above this (needs rlHyperparams.klBeta above 0)")


class Execution(_Part):
    device_profile: str = Field(default="cpu", alias="deviceProfile", description="Device profile, e.g. cpu or h200")
    gpus: int = Field(default=1, ge=0, le=1024, description="Devices per run (the cpu profile uses one slot)")
    sharding: Literal["ddp", "fsdp"] | None = Field(
        default=None, description="How a run on several devices splits its work: ddp (a whole copy of the model on "
                                  "each device) or fsdp (its weights, adapter and optimizer state sharded across "
                                  "them). Left out: fsdp only where the memory estimate says a whole copy does not fit "
                                  "one device (ddp on the cpu)")
    save_every: int | None = Field(default=None, ge=1, le=MOST_STEPS, alias="saveEvery",
                                   description="Save every this many updates")
    keep_adapters: int | None = Field(default=None, ge=1, le=10_000, alias="keepAdapters",
                                      description="Adapter saves kept")
    keep_training_states: int | None = Field(default=None, ge=1, le=10_000, alias="keepTrainingStates",
                                             description="Training-state saves kept")
    resumable_save_every: int = Field(default=10, ge=1, le=MOST_STEPS, alias="resumableSaveEvery",
                                      description="Upload training state at least every this many saves")
    resumable_save_minutes: float = Field(default=5, gt=0, alias="resumableSaveMinutes",
                                          description="…or this many minutes after the last one")
    max_attempts: int = Field(default=3, ge=1, le=100, alias="maxAttempts",
                              description="Attempts a run gets when its worker is lost: each one after the first "
                                          "resumes from the newest save holding training state")
    pause_at_step: int | None = Field(default=None, ge=1, le=MOST_STEPS, alias="pauseAtStep",
                                      description="Save with the training state at this update and pause there, as "
                                                  "a pause with --checkpoint save would (resume goes on from that "
                                                  "save)")
    # left out of the stored document unless on, so the documents of runs stored before stay as they were
    share_base: bool = Field(default=False, alias="shareBase", exclude_if=lambda value: not value,
                             description="Train beside the other queued runs of its project over the same base model "
                                         "and device that state it too, each a LoRA adapter of its own on one loaded "
                                         "copy of the base (sft, one device); each keeps its own optimizer, saves, "
                                         "pause and resume")
    stop_when: StopWhen | None = Field(default=None, alias="stopWhen",
                                      description="Reinforcement (grpo, gspo): when the run stops itself, keeping the "
                                                  "adapter it has trained (rewardDropBelow, klAbove)")


class Source(_Part):
    model: str = Field(max_length=300, description="A registered adapter NS/NAME[:vN|:ALIAS] over the run's base "
                                                   "model: the run trains that adapter (its LoRA settings kept)")


class RunPlan(_Part):
    kind: Literal["run"] = Field(description="Always run")
    project: str = Field(description="Training project; its name is the registry namespace of its models")
    base_model: str = Field(alias="baseModel", description="Base model: entry id, repository or prefix")
    model_name: str | None = Field(default=None, alias="modelName",
                                   description="Name of the registered model (default: the base model's name)")
    config: RunConfig = Field(description="What determines the trained model (its configuration hash)")
    execution: Execution = Field(default_factory=Execution, description="How the run executes (not in the hash)")
    submission_id: str | None = Field(default=None, alias="submissionId", description="Idempotency key")
    description: str | None = Field(default=None, description="Free text")
    config_name: str | None = Field(default=None, alias="configName", max_length=64,
                                    description="Column name in scores tables (default: the model name and the "
                                                "config hash's first 8 characters)")
    source: Source | None = Field(default=None, description="Start from existing weights: source.model, a "
                                                            "registered adapter the run trains on")


def parse_plan(document: Any) -> RunPlan:
    """Validate a plan document, refusing every problem by its path (all of them at once).

    Keys have one spelling, camelCase but for the three reference-check bounds the release notes name in
    snake_case: another spelling of a key (`max_steps` for `maxSteps`) is an unknown field, refused with the key it
    spells suggested."""
    try:
        return RunPlan.model_validate(document)
    except ValidationError as error:
        items = [(item, _other_spelling(item)) for item in error.errors()]
        # a required key given in another spelling is named once, as that spelling, not also as missing
        given = {(*item["loc"][:-1], spelling[1]) for item, spelling in items if spelling}
        problems = [f"{'.'.join(str(p) for p in item['loc'])}: {_words(item, spelling)}" for item, spelling in items
                    if not (item["type"] == "missing" and tuple(item["loc"]) in given)]
        hint = "fix the fields named; unknown fields are refused"
        respelled = next((spelling for _, spelling in items if spelling), None)
        if respelled:
            hint += f"; each plan key has one spelling ({respelled[0]} is spelled {respelled[1]})"
        raise Invalid(f"the run plan is not valid: {'; '.join(problems[:20])}", hint=hint) from None


def _words(item: dict[str, Any], spelling: tuple[str, str] | None) -> str:
    if item["type"] != "extra_forbidden":
        return item["msg"]
    return f"unknown field (did you mean {spelling[1]}?)" if spelling else "unknown field"


def _other_spelling(item: dict[str, Any]) -> tuple[str, str] | None:
    """(key, the plan key it spells) for an unknown key that is another spelling of a known one (snake_case,
    kebab-case or another case), else None."""
    if item["type"] != "extra_forbidden" or not item["loc"] or not isinstance(item["loc"][-1], str):
        return None
    model: Any = RunPlan
    for part in item["loc"][:-1]:
        field = _field(model, part)
        model = field.annotation if field is not None else None
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return None
    key = item["loc"][-1]
    known = [info.alias or name for name, info in model.model_fields.items()]
    return next(((key, spelled) for spelled in known if _folded(spelled) == _folded(key)), None)


def _field(model: type[BaseModel], key: str) -> Any:
    """The field of `model` written as `key` in a plan (its alias, or its name where it has none)."""
    return next((info for name, info in model.model_fields.items() if (info.alias or name) == key), None)


def _folded(key: str) -> str:
    """A key without case, underscores or dashes: max_steps, max-steps and MaxSteps all fold to maxsteps."""
    return key.replace("_", "").replace("-", "").lower()


def load_plan_text(text: str) -> dict[str, Any]:
    """A plan file's document (YAML or JSON)."""
    try:
        document = json.loads(text) if text.lstrip().startswith("{") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as error:
        raise Invalid(f"the run file is not valid YAML or JSON: {error}") from None
    if not isinstance(document, dict):
        raise Invalid("the run file must hold one mapping (kind: run, project, baseModel, config, …)")
    return document


def stated_and_resolved(model: BaseModel, prefix: str = "") -> dict[str, dict[str, Any]]:
    """Every leaf field: {"value": resolved value, "source": "file" | "default"}."""
    result: dict[str, dict[str, Any]] = {}
    for name, info in type(model).model_fields.items():
        key = f"{prefix}{info.alias or name}"
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            nested = stated_and_resolved(value, key + ".")
            if name not in model.model_fields_set:
                nested = {k: {**v, "source": "default"} for k, v in nested.items()}
            result.update(nested)
        else:
            result[key] = {"value": value, "source": "file" if name in model.model_fields_set else "default"}
    return result


# --- how many optimizer updates a run makes ---------------------------------------------------------------------
# An epoch is ceil(rows / (batch size x gradient accumulation x devices)) updates; `maxSteps`, where set, is the
# run's length whatever the epochs (the data is cycled), as in the Transformers trainer.


REINFORCEMENT = frozenset({"grpo", "gspo"})
METHODS: tuple[str, ...] = get_args(RunConfig.model_fields["method"].annotation)


def steps_per_epoch(rows: int, batch_size: int, accumulation: int, devices: int = 1) -> int:
    return max(1, ceil(rows / (batch_size * accumulation * devices)))


