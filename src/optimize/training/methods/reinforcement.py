"""Reinforcement methods, GRPO and GSPO: a LoRA policy rolls out each prompt of a chat dataset `generations` times,
the completions are scored by the run's reward terms (`config.reward.terms`: built-in checks or a scoring bundle's
function, `optimize.scoring`), and TRL's GRPOTrainer updates the adapter on the group-relative advantages, with a
KL penalty against the adapter switched off (`klBeta`, default 0.04). GSPO is GRPO with sequence-level importance
sampling. They own the plan's `rlHyperparams` (instead of `hyperparams`) and `reward` sections.

Prompts are rendered by the one chat core (`training.prep.prompts`): TRL receives the rendered text and tokenizes
it without adding special tokens, so a prompt trains exactly as it was measured. A dataset with rows that offer
tools is refused (no reinforcement engine renders a row's tools into its prompts).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from optimize.core.errors import Invalid, Refused
from optimize.training.methods.base import TRAINER_METRICS, Method

if TYPE_CHECKING:
    from optimize.schemas.plans import RlHyperparams, RunConfig, StopWhen
    from optimize.schemas.resolved import ResolvedReinforcement, ResolvedTerm

# GRPOTrainer's log keys -> Optimize's metric names (per update); each term's `rewards/<name>/mean|std` too
ROLLOUT_METRICS = {"reward": "reward", "reward_std": "rewardStd", "kl": "kl",
                   "frac_reward_zero_std": "zeroVarianceShare", "completions/mean_length": "completionLength",
                   "completions/clipped_ratio": "clippedShare",
                   # an update's seconds (TRL's step_time) and the part of them spent generating and scoring its
                   # rollouts (`RenderedPrompts` times it); the rest is the update itself
                   "step_time": "stepSeconds", "generation_time": "generationSeconds"}


class Reinforcement(Method):
    dataset_kind = "chat"
    section = "rlHyperparams"
    trained_by = "rlHyperparams"
    takes_validation = False  # refused by `admit`: the trained model is evaluated instead
    columns = ()
    text_columns = ("prompt", "sample")
    metric_names = {**TRAINER_METRICS, **ROLLOUT_METRICS}
    reference_check = False  # the check compares supervised batches; a rollout batch has no labels
    importance_sampling = "token"
    rewarded = True
    length_checked = False  # a prompt's budget is checked as the worker renders it (`training.prep.prompts`)

    def admit_datasets(self, picks: list[tuple[str, Any]]) -> None:
        for field, pick in picks:
            if pick is not None and pick.tool_rows:
                raise Refused(f"{field} {pick.reference} has {pick.tool_rows} row(s) that offer tools; the "
                              f"{self.engine} engine of a {self.name} run does not render a row's tools into the "
                              "prompts it rolls out, so the run would train unlike evaluation and serving",
                              hint="remove tools from every row of a reinforcement dataset")

    def admit(self, config) -> None:
        if "hyperparams" in config.model_fields_set:
            raise Refused(f"a {self.name} run takes its adapter, optimizer and loop from config.rlHyperparams, not "
                          "config.hyperparams", hint="move the settings under config.rlHyperparams")
        if config.reward is None:
            raise Refused(f"a {self.name} run needs config.reward.terms: what scores its completions",
                          hint="e.g. reward: {terms: [{kind: exact}]}, or a scoring bundle's function "
                               "(kind: rule, bundle: NS/NAME, function: MODULE:FUNCTION)")
        if config.validation.dataset and not self.takes_validation:
            raise Refused(f"a {self.name} run takes no validation dataset yet",
                          hint="remove config.validation, and evaluate the trained model instead")
        if config.data.truncation not in ("error", "drop"):
            raise Refused(f"data.truncation: {config.data.truncation} applies to supervised rows; a {self.name} run "
                          "keeps or leaves out whole prompts", hint="set data.truncation to error or drop")
        from optimize.scoring.terms import check_term

        for index, term in enumerate(config.reward.terms):
            check_term(term.model_dump(by_alias=True, exclude_none=True), f"config.reward.terms[{index}]")

    def admit_stop_when(self, stop_when: StopWhen, config: ResolvedReinforcement) -> None:
        """`execution.stopWhen` watches the run's reward, and its KL where it takes a KL penalty (TRL measures none
        without one)."""
        if stop_when.reward_drop_below is None and stop_when.kl_above is None:
            raise Invalid("execution.stopWhen names no bound",
                          hint="set execution.stopWhen.rewardDropBelow, klAbove or both, or remove execution.stopWhen")
        if stop_when.kl_above is not None and config.rl_hyperparams.kl_beta == 0:
            raise Refused("execution.stopWhen.klAbove watches the KL against the starting policy, which a run with "
                          "rlHyperparams.klBeta 0 does not measure",
                          hint="remove execution.stopWhen.klAbove, or set rlHyperparams.klBeta above 0")

    def check_references(self, terms: list[ResolvedTerm], blobs) -> None:
        """Each rule term's bundle must import and name its function: checked in a limited child process now,
        before a device is claimed."""
        from optimize.scoring import BundleRunner

        for index, term in enumerate(terms):
            if term.kind == "rule":
                with BundleRunner(blobs.verified_path(term.bundle_sha256), term.function,
                                  label=f"config.reward.terms[{index}] {term.bundle}") as runner:
                    runner.check()

    def gradient_checkpointing(self, on_cpu: bool) -> bool | None:
        return False  # rollouts generate with the cache; recomputing activations only slows them

    def trained_with(self, config: RunConfig) -> RlHyperparams:
        from optimize.schemas.plans import RlHyperparams

        return config.rl_hyperparams or RlHyperparams()

    def kl_penalty(self, config: ResolvedReinforcement) -> float:
        return config.rl_hyperparams.kl_beta

    def sequences_per_row(self, trained_with: RlHyperparams) -> int:
        return trained_with.generations  # a prompt's group of completions trains in one pass

    def generation_share(self, trained_with: RlHyperparams, on_cpu: bool) -> float:
        # vLLM colocated: its weights and cache beside the policy's weights while it generates (asleep otherwise)
        return VLLM_MEMORY_SHARE if rollout_engine(trained_with.rollout_engine, on_cpu) == "vllm" else 0.0

    def resolve(self, config: RunConfig, shared: dict[str, Any], on_cpu: bool
                ) -> tuple[ResolvedReinforcement, list[str]]:
        """Every rollout default as resolved (klBeta 0.04 and temperature 0.7 when omitted), the importance-sampling
        level of the method, and each reward term's name."""
        from optimize.schemas.resolved import ResolvedReinforcement, ResolvedReward, ResolvedRlHyperparams

        rl = self.trained_with(config)
        stated = {name: getattr(rl, name) for name in type(rl).model_fields}
        resolved_rl = ResolvedRlHyperparams(**{**stated, "importance_sampling": rl.importance_sampling
                                               or self.importance_sampling,
                                               "rollout_engine": rollout_engine(rl.rollout_engine, on_cpu)})
        terms = named_terms(config.reward.terms)
        names = [term.name for term in terms]
        if len(set(names)) != len(names):
            raise Refused(f"config.reward.terms name a term twice ({', '.join(names)})",
                          hint="give each term its own name")
        reward = ResolvedReward(terms=terms, aggregation=config.reward.aggregation)
        return ResolvedReinforcement(**shared, method=self.name, hyperparams=None, rl_hyperparams=resolved_rl,
                                     reward=reward), []

    # --- rows (worker)

    def fitter(self, renderer, config: ResolvedReinforcement):
        from optimize.training.prep.prompts import PromptFitter

        return PromptFitter(renderer, config.max_seq_length, config.rl_hyperparams.max_completion_length,
                            config.data.truncation)

    def columns_of(self, prompt) -> tuple[Any, ...]:
        return prompt.text, prompt.sample

    def check_fit(self, fit, reference: str) -> None:
        fit.check(reference)

    # --- the TRL recipe (engine)

    def arguments(self, config: ResolvedReinforcement, common: dict[str, Any], cuda: bool):
        from trl import GRPOConfig

        rl = config.rl_hyperparams
        greedy = rl.temperature == 0
        completions = rl.training.batch_size * rl.generations  # a device's prompts, each rolled out as a group
        settings = {**common, "per_device_train_batch_size": completions, "per_device_eval_batch_size": completions}
        extra = {"epsilon": 3e-4, "epsilon_high": 4e-4} if rl.importance_sampling == "sequence" else {}
        return GRPOConfig(**settings, **vllm_arguments(rl.rollout_engine, config.max_seq_length, cuda),
                          beta=rl.kl_beta, num_generations=rl.generations,
                          max_completion_length=rl.max_completion_length,
                          temperature=1.0 if greedy else rl.temperature,
                          generation_kwargs={"do_sample": False} if greedy else None,
                          importance_sampling_level=rl.importance_sampling,
                          reward_weights=[term.weight for term in config.reward.terms],
                          multi_objective_aggregation="normalize_then_sum"
                          if config.reward.aggregation == "normalizeThenSum" else "sum_then_normalize",
                          shuffle_dataset=True, **extra)

    def trainer(self, model, args, tokenizer, peft_config, train_dataset, eval_dataset, callbacks,
                config: ResolvedReinforcement | None = None, workdir=None, rollouts=None):
        """`rollouts(update, items)`, when given, receives each update's bounded sample of rollouts (prompts,
        completions, each term's score and the weighted total; `rewards.RolloutRecorder`)."""
        from trl import GRPOTrainer
        from trl.trainer.utils import RepeatSampler

        from optimize.training.methods.rewards import reward_functions

        class EpochSeeded(RepeatSampler):
            """TRL's sampler draws each epoch's order from one generator, so an attempt resumed in a later epoch
            would start that generator over; here epoch N's order comes from (seed, N), which the trainer sets at
            every epoch, resumed or not, so a resumed run rolls out the prompts the uninterrupted one did."""

            def set_epoch(self, epoch: int) -> None:
                if self.shuffle:
                    self.generator.manual_seed((self.seed or 0) * 1_000_003 + int(epoch))

        class RenderedPrompts(GenerationTimed, GRPOTrainer):
            """Prompts come rendered by the chat core: tokenized as they are, without special tokens added."""

            def _tokenize_prompts(self, prompts):
                return self.processing_class(text=prompts, add_special_tokens=False)["input_ids"], None, {}

            def _get_train_sampler(self, dataset=None):
                sampler = super()._get_train_sampler(dataset)
                sampler.__class__ = EpochSeeded
                return sampler


        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        return RenderedPrompts(model=model, args=args, processing_class=tokenizer, peft_config=peft_config,
                               reward_funcs=reward_functions(config, workdir, rollouts), train_dataset=train_dataset,
                               eval_dataset=eval_dataset, callbacks=callbacks)

    def metric_values(self, logs: dict[str, Any]) -> dict[str, float]:
        values = super().metric_values(logs)
        if "stepSeconds" in values and "generationSeconds" in values:
            values["updateSeconds"] = max(0.0, values["stepSeconds"] - values["generationSeconds"])
        for key, value in logs.items():  # each term's mean and spread: rewards/<name>/mean -> reward:<name>
            if key.startswith("rewards/") and key.endswith(("/mean", "/std")):
                name, figure = key[len("rewards/"):].rsplit("/", 1)
                # None when the term scored no completion of the update (a judge that gave no score, a bundle
                # that failed on every one): TRL logs no number then
                number = None if value is None else float(value)
                values[f"reward:{name}" + ("" if figure == "mean" else ":std")] = \
                    number if number is not None and math.isfinite(number) else None
        return values

    # --- the smoke check (engine)

    def smoke_answer_tokens(self, config: ResolvedReinforcement) -> int:
        return config.rl_hyperparams.max_completion_length

    def smoke_terms(self, config: ResolvedReinforcement) -> list[dict[str, Any]]:
        return [term.member_spec() for term in config.reward.terms]  # scored as the run's rollouts are

    def results(self, config: ResolvedReinforcement, last: dict[str, float]) -> dict[str, Any]:
        """The run's last rollout figures: reward (and per term), KL, the share of groups whose rewards do not vary."""
        rl = config.rl_hyperparams
        terms = {term.name: last.get(f"reward:{term.name}") for term in config.reward.terms}
        return {"rollouts": {"reward": last.get("reward"), "rewardStd": last.get("rewardStd"), "terms": terms,
                             "kl": last.get("kl"), "zeroVarianceShare": last.get("zeroVarianceShare"),
                             "completionLength": last.get("completionLength"),
                             "clippedShare": last.get("clippedShare"), "klBeta": rl.kl_beta,
                             "temperature": rl.temperature, "generations": rl.generations,
                             "importanceSampling": rl.importance_sampling}}


VLLM_MEMORY_SHARE = 0.3  # of the device, for the colocated engine's weights and cache while it generates


def rollout_engine(stated: str | None, on_cpu: bool) -> str:
    """What generates a run's rollouts: as stated, else vLLM on a GPU where it is installed, Transformers on the cpu.
    vLLM stated where it cannot run is refused by name."""
    import importlib.util

    installed = importlib.util.find_spec("vllm") is not None
    if stated == "vllm" and on_cpu:
        raise Refused("rlHyperparams.rolloutEngine: vllm generates on a GPU; the cpu profile rolls out with "
                      "Transformers", hint="remove rlHyperparams.rolloutEngine, or set it to transformers")
    if stated == "vllm" and not installed:
        raise Refused("rlHyperparams.rolloutEngine: vllm needs vLLM, which is not installed on this deployment",
                      hint="install vllm on the training machines, or set rlHyperparams.rolloutEngine to transformers")
    return stated or ("vllm" if installed and not on_cpu else "transformers")


def vllm_arguments(engine: str | None, max_seq_length: int, cuda: bool) -> dict[str, Any]:
    """TRL's settings for rollouts generated by vLLM, colocated in the training process: asleep while the policy
    updates (its memory handed back), the adapter merged into its weights and streamed to it a tensor at a time
    after each update (TRL's own sync). None for Transformers' rollouts."""
    if engine != "vllm":
        return {}
    if not cuda:  # said, never fallen back from silently: the run was admitted to roll out with vLLM
        raise RuntimeError("the run rolls out with vLLM (rlHyperparams.rolloutEngine: vllm), and this training "
                           "machine has no GPU; run it on a GPU profile, or set rlHyperparams.rolloutEngine to "
                           "transformers")
    return {"use_vllm": True, "vllm_mode": "colocate", "vllm_enable_sleep_mode": True,
            "vllm_gpu_memory_utilization": VLLM_MEMORY_SHARE, "vllm_max_model_length": max_seq_length}


class GenerationTimed:
    """A GRPOTrainer mixin timing what each update spends generating and scoring its rollouts, logged as
    `generation_time` beside TRL's own `step_time` (`generationSeconds`, `stepSeconds`). The benchmarks' bare TRL
    trainer takes it too, so both sides are timed alike."""

    def _generate_and_score_completions(self, inputs):
        started = _synchronized_clock()
        generated = super()._generate_and_score_completions(inputs)
        self._generating = getattr(self, "_generating", 0.0) + _synchronized_clock() - started
        return generated

    def training_step(self, model, inputs, num_items_in_batch):
        output = super().training_step(model, inputs, num_items_in_batch)
        if self._step % self.current_gradient_accumulation_steps == 0:  # the update's last pass
            self._metrics["train"]["generation_time"].append(getattr(self, "_generating", 0.0))
            self._generating = 0.0
        return output


def _synchronized_clock() -> float:
    """Now, once the GPU's queued work is done (its kernels run asynchronously), so a span times what it did."""
    import time

    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter()


class Grpo(Reinforcement):
    name = "grpo"


class Gspo(Reinforcement):
    name = "gspo"
    importance_sampling = "sequence"


def named_terms(terms) -> list[ResolvedTerm]:
    """The plan's reward terms, each named: by its `name`, else its kind (numbered from the second of a kind on)."""
    from optimize.schemas.resolved import ResolvedTerm

    seen: dict[str, int] = {}
    named = []
    for term in terms:
        base = term.name or term.kind
        seen[base] = seen.get(base, 0) + 1
        stated = term.model_dump(by_alias=True, exclude_unset=True)
        named.append(ResolvedTerm.model_validate(
            {**stated, "name": term.name or (base if seen[base] == 1 else f"{base}{seen[base]}")}))
    return named


GRPO, GSPO = Grpo(), Gspo()
