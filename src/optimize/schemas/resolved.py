"""The resolved plan: what admission decided for every setting of a run, typed, one model per training method.

Admission (`training.admission.resolve.admit`) makes it once from the run plan (`schemas.plans.RunPlan`): the
datasets frozen to their versions, the precision, attention and kernels, gradient checkpointing and sharding from
the memory estimate, the method's own defaults (a dpo run's loss, a reinforcement run's rollouts and its reward
terms' names, bundles and judges). The run row stores its JSON (`document()`, camelCase: the settings `runs get`
shows and the configuration hash covers); the worker's spec carries it and the worker reads it back through the
same model; the methods, the harness, the smoke check and branching read its fields.

`ResolvedConfig` is a union discriminated on `method`: `ResolvedSft`, `ResolvedDpo` and `ResolvedReinforcement`
(grpo and gspo). Each holds every key of the plan's `config`, so its JSON is the one runs stored before it
existed, and those load back into it. Where a setting came from (the plan, a default, a default kernel, the
memory estimate) is the run's `sources`, recorded beside it.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_serializer

from optimize.schemas.plans import (
    MOST_TOKENS,
    Checks,
    Data,
    Execution,
    Hyperparams,
    Loss,
    Preference,
    Reward,
    RewardTerm,
    RlHyperparams,
    Smoke,
    TrainingLoop,
    Validation,
)

# What admission adds to a rule term (its bundle's archive digest) and a judge term (its model frozen): present on
# terms of that kind only, so a term's JSON is the one runs have always stored.
RULE_KEYS = ("bundleSha256",)
JUDGE_KEYS = ("judgeReference", "judgeBaseEntryId", "judgeBaseCommit", "judgeManifestDigest")
# What a run's worker adds to its own copy of a term (local files); never stored, never sent.
LOCAL_KEYS = ("bundlePath", "judgeModel", "judgeAdapterPath")
RESOLVED_FIELDS = {"bundle_sha256", "judge_reference", "judge_base_entry_id", "judge_base_commit",
                   "judge_manifest_digest", "bundle_path", "judge_model", "judge_adapter_path"}


class _Resolved(BaseModel):
    # Resolved values are written by the platform, not by users: built by field name in code, read by alias (the
    # stored JSON). Unknown keys are refused, so a misspelled setting fails where it is made.
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ResolvedModelSettings(_Resolved):
    precision: Literal["fp32", "bf16", "fp16"] = Field(description="Training precision")
    gradient_checkpointing: bool = Field(alias="gradientCheckpointing",
                                         description="Recompute activations in the backward pass")
    attention_implementation: str = Field(alias="attentionImplementation", description="sdpa, eager or flex_attention")
    # null in what runs stored before a run could train anything but a LoRA adapter: left out of the JSON then, so
    # those documents and their configuration hashes stay as they were
    adapter: Literal["lora", "full", "qlora"] | None = Field(default=None, exclude_if=lambda value: value is None,
                                                             description="lora, full or qlora")

    @property
    def trains(self) -> str:
        """What the run trains: lora, full or qlora (a run stored before the choice existed trained lora)."""
        return self.adapter or "lora"


class ResolvedPreference(Preference):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    fused_loss: bool = Field(alias="fusedLoss", description="Liger's fused DPO loss (a GPU run's)")


class ResolvedTerm(RewardTerm):
    """A reward term as admission froze it: named, its bundle's version and archive digest, its judge's model."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = Field(max_length=64, description="The term's name in metrics")
    bundle_sha256: str | None = Field(default=None, alias="bundleSha256",
                                      description="rule: the digest of the bundle's archive")
    judge_reference: str | None = Field(default=None, alias="judgeReference",
                                        description="judge: the exact model that grades")
    judge_base_entry_id: str | None = Field(default=None, alias="judgeBaseEntryId",
                                            description="judge: the base model the worker loads")
    judge_base_commit: str | None = Field(default=None, alias="judgeBaseCommit", description="judge: its commit")
    judge_manifest_digest: str | None = Field(default=None, alias="judgeManifestDigest",
                                              description="judge: a trained judge's adapter weights manifest")
    # the worker's own copy only (`worker.run`): where it put the bundle and the judge's files
    bundle_path: str | None = Field(default=None, alias="bundlePath", description="rule: the bundle on local disk")
    judge_model: dict[str, Any] | None = Field(default=None, alias="judgeModel",
                                               description="judge: its base model's block of the worker's spec")
    judge_adapter_path: str | None = Field(default=None, alias="judgeAdapterPath",
                                           description="judge: its adapter's local folder")

    @model_serializer(mode="wrap")
    def _as_stored(self, handler) -> dict[str, Any]:
        """What admission added only on a term of its kind, the worker's local files only where it set them."""
        dumped = handler(self)
        own = (RULE_KEYS if self.kind == "rule" else ()) + (JUDGE_KEYS if self.kind == "judge" else ())
        for key in (*RULE_KEYS, *JUDGE_KEYS, *LOCAL_KEYS):
            for spelled in (key, _snake(key)):  # dumped by alias, or by field name
                if spelled in dumped and key not in own and (key not in LOCAL_KEYS or dumped[spelled] is None):
                    del dumped[spelled]
        return dumped

    def as_plan(self) -> dict[str, Any]:
        """The term as a plan states it: a judge names the exact model version it was judged by."""
        planned = {"model": self.judge_reference} if self.judge_reference else {}
        return RewardTerm.model_validate({**self.model_dump(by_alias=True, exclude=RESOLVED_FIELDS), **planned}
                                         ).model_dump(by_alias=True, mode="json")

    def member_spec(self) -> dict[str, Any]:
        """The term as a scoring member reads it (`scoring.terms`), with what admission and the worker added."""
        return self.model_dump(by_alias=True, mode="json")


class ResolvedReward(Reward):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    terms: list[ResolvedTerm] = Field(min_length=1, max_length=32, description="The reward's terms, each named")


class ResolvedRlHyperparams(RlHyperparams):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    importance_sampling: Literal["token", "sequence"] = Field(
        alias="importanceSampling", description="Importance-sampling level of the policy ratio")
    # null in what runs stored before vLLM rolled out (Transformers did): left out of the JSON then
    rollout_engine: Literal["transformers", "vllm"] | None = Field(
        default=None, alias="rolloutEngine", exclude_if=lambda value: value is None,
        description="What generates the rollouts: transformers or vllm")


class _ResolvedConfig(_Resolved):
    """What every method's resolved config holds (the keys of the plan's `config`)."""

    dataset: str = Field(description="The training dataset's exact version, NS/NAME:vN")
    seed: int = Field(ge=0, le=2**32 - 1, description="Seed for data order, initialization and sampling")
    max_seq_length: int = Field(ge=16, le=MOST_TOKENS, alias="maxSeqLength", description="Longest sequence, tokens")
    model: ResolvedModelSettings = Field(description="How the base model is loaded and run")
    liger: dict[str, bool] = Field(default_factory=dict, description="Liger kernels on or off, stated or default")
    data: Data = Field(default_factory=Data, description="What happens to rows that do not fit")
    loss: Loss = Field(default_factory=Loss, description="Which tokens are trained")
    validation: Validation = Field(default_factory=Validation, description="The validation dataset's exact version")
    preference: Preference = Field(default_factory=Preference, description="Preference (dpo) settings")
    smoke: Smoke | None = Field(default=None, description="The smoke check before the full run")
    checks: Checks = Field(default_factory=Checks, description="The checks before the first update")
    # null in what runs stored before rows were packed (they were not) and in a run whose method does not pack:
    # left out of the JSON then, so those documents and their configuration hashes stay as they were
    packing: bool | None = Field(default=None, exclude_if=lambda value: value is None,
                                 description="Whether the rows are packed into maxSeqLength bins")

    trained_by: ClassVar[str]  # the field holding the adapter, optimizer and loop the run trains with

    @property
    def trained_with(self) -> Hyperparams | ResolvedRlHyperparams:
        """The adapter, optimizer and loop the run trains with (`rlHyperparams` for a reinforcement run)."""
        return getattr(self, self.trained_by)

    @property
    def loop(self) -> TrainingLoop:
        return self.trained_with.training

    def as_plan(self) -> dict[str, Any]:
        """The config as a plan states it (a branch's start): what admission added to a reward term beside its fields
        dropped (a bundle's archive digest, a judge's base model and manifest: the child's admission resolves them
        again), a judge naming the exact model version it was judged by; a section the run does not train by,
        null here, left out."""
        document = self.model_dump(by_alias=True, mode="json", exclude={"hyperparams"} if self.hyperparams is None
                                   else set())
        reward = getattr(self, "reward", None)
        if reward is not None:
            document["reward"]["terms"] = [term.as_plan() if isinstance(term, ResolvedTerm) else
                                           term.model_dump(by_alias=True, mode="json") for term in reward.terms]
        return document

    def with_trained(self, **changes: Any) -> Self:
        """A copy whose adapter, optimizer and loop section has `changes` (by field name) applied."""
        return self.model_copy(update={self.trained_by: self.trained_with.model_copy(update=changes)})

    def with_loop(self, **changes: Any) -> Self:
        """A copy whose training loop has `changes` (by field name) applied: a smoke slice's or a branch's length."""
        return self.with_trained(training=self.loop.model_copy(update=changes))


class _ByHyperparams(_ResolvedConfig):
    """A supervised or preference run's config: it trains by `hyperparams`."""

    hyperparams: Hyperparams = Field(default_factory=Hyperparams, description="Adapter, optimizer and loop")
    # a supervised or preference plan may state these; its run does not read them
    rl_hyperparams: RlHyperparams | None = Field(default=None, alias="rlHyperparams", description="Not read")
    reward: Reward | None = Field(default=None, description="Not read")
    trained_by: ClassVar[str] = "hyperparams"


class ResolvedSft(_ByHyperparams):
    method: Literal["sft"] = Field(description="sft")


class ResolvedDpo(_ByHyperparams):
    method: Literal["dpo"] = Field(description="dpo")
    preference: ResolvedPreference = Field(description="Beta, the loss and whether Liger's fused loss computes it")


class ResolvedReinforcement(_ResolvedConfig):
    method: Literal["grpo", "gspo"] = Field(description="grpo or gspo")
    hyperparams: None = Field(default=None, description="None: the run trains by rlHyperparams")
    rl_hyperparams: ResolvedRlHyperparams = Field(alias="rlHyperparams",
                                                  description="Adapter, optimizer, loop and rollouts")
    reward: ResolvedReward = Field(description="The reward's terms, named and resolved")
    trained_by: ClassVar[str] = "rl_hyperparams"


ResolvedConfig = Annotated[ResolvedSft | ResolvedDpo | ResolvedReinforcement, Field(discriminator="method")]
CONFIG = TypeAdapter(ResolvedConfig)


class ResolvedPlan(_Resolved):
    """A run's resolved settings: its `config` (what determines the trained model) and its `execution`."""

    config: ResolvedConfig = Field(description="What determines the trained model: its configuration hash covers it")
    execution: Execution = Field(default_factory=Execution, description="How the run executes (not in the hash)")

    def document(self) -> dict[str, Any]:
        """The JSON the run row stores and `runs get` shows (camelCase)."""
        return self.model_dump(by_alias=True, mode="json")


def resolved_config(document: dict[str, Any]) -> ResolvedSft | ResolvedDpo | ResolvedReinforcement:
    """A resolved config read back from its JSON (a run row's, a worker's spec)."""
    return CONFIG.validate_python(document)


def resolved_plan(document: dict[str, Any]) -> ResolvedPlan:
    """A run row's resolved settings read back from the JSON it stores."""
    return ResolvedPlan.model_validate(document)


def resolved_execution(resolved: dict[str, Any] | None) -> Execution:
    """How a run executes, from the resolved JSON its row stores (a row stored without it reads as the defaults)."""
    return Execution.model_validate((resolved or {}).get("execution") or {})


def _snake(key: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in key)
