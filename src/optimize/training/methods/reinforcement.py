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
from typing import Any

from optimize.core.errors import Refused
from optimize.training.methods.base import TRAINER_METRICS, Method

# GRPOTrainer's log keys -> Optimize's metric names (per update); each term's `rewards/<name>/mean|std` too
ROLLOUT_METRICS = {"reward": "reward", "reward_std": "rewardStd", "kl": "kl",
                   "frac_reward_zero_std": "zeroVarianceShare", "completions/mean_length": "completionLength",
                   "completions/clipped_ratio": "clippedShare"}


class Reinforcement(Method):
    dataset_kind = "chat"
    section = "rlHyperparams"
    columns = ()
    text_columns = ("prompt", "sample")
    metric_names = {**TRAINER_METRICS, **ROLLOUT_METRICS}
    reference_check = False  # the check compares supervised batches; a rollout batch has no labels
    importance_sampling = "token"

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
        if config.validation.dataset:
            raise Refused(f"a {self.name} run takes no validation dataset yet",
                          hint="remove config.validation, and evaluate the trained model instead")
        if config.data.truncation not in ("error", "drop"):
            raise Refused(f"data.truncation: {config.data.truncation} applies to supervised rows; a {self.name} run "
                          "keeps or leaves out whole prompts", hint="set data.truncation to error or drop")
        from optimize.scoring.terms import check_term

        for index, term in enumerate(config.reward.terms):
            check_term(term.model_dump(by_alias=True, exclude_none=True), f"config.reward.terms[{index}]")

    def check_references(self, config: dict[str, Any], blobs) -> None:
        """Each rule term's bundle must import and name its function: checked in a limited child process now,
        before a device is claimed."""
        from optimize.scoring import BundleRunner

        for index, term in enumerate(config["reward"]["terms"]):
            if term["kind"] == "rule":
                with BundleRunner(blobs.verified_path(term["bundleSha256"]), term["function"],
                                  label=f"config.reward.terms[{index}] {term['bundle']}") as runner:
                    runner.check()

    def gradient_checkpointing(self, on_cpu: bool) -> bool | None:
        return False  # rollouts generate with the cache; recomputing activations only slows them

    def resolve(self, resolved: dict[str, Any], config, on_cpu: bool) -> list[str]:
        """Every rollout default as resolved (klBeta 0.04 and temperature 0.7 when omitted), the importance-sampling
        level of the method, and each reward term's name."""
        from optimize.schemas.plans import RlHyperparams

        if resolved.get("rlHyperparams") is None:
            resolved["rlHyperparams"] = RlHyperparams().model_dump(by_alias=True, mode="json")
        rl = resolved["rlHyperparams"]
        rl["importanceSampling"] = rl["importanceSampling"] or self.importance_sampling
        resolved["hyperparams"] = None  # the run trains by rlHyperparams
        seen: dict[str, int] = {}
        for term in resolved["reward"]["terms"]:
            base = term["name"] or term["kind"]
            seen[base] = seen.get(base, 0) + 1
            term["name"] = term["name"] or (base if seen[base] == 1 else f"{base}{seen[base]}")
        names = [t["name"] for t in resolved["reward"]["terms"]]
        if len(set(names)) != len(names):
            raise Refused(f"config.reward.terms name a term twice ({', '.join(names)})",
                          hint="give each term its own name")
        return []

    # --- rows (worker)

    def fitter(self, renderer, config: dict[str, Any]):
        from optimize.training.prep.prompts import PromptFitter

        return PromptFitter(renderer, config["maxSeqLength"], config["rlHyperparams"]["maxCompletionLength"],
                            config["data"]["truncation"])

    def columns_of(self, prompt) -> tuple[Any, ...]:
        return prompt.text, prompt.sample

    def check_fit(self, fit, reference: str) -> None:
        fit.check(reference)

    # --- the TRL recipe (engine)

    def arguments(self, config: dict[str, Any], common: dict[str, Any], cuda: bool):
        from trl import GRPOConfig

        rl = config["rlHyperparams"]
        terms = config["reward"]["terms"]
        greedy = rl["temperature"] == 0
        settings = {**common, "per_device_train_batch_size": rl["training"]["batchSize"] * rl["generations"],
                    "per_device_eval_batch_size": rl["training"]["batchSize"] * rl["generations"]}
        extra = {"epsilon": 3e-4, "epsilon_high": 4e-4} if rl["importanceSampling"] == "sequence" else {}
        return GRPOConfig(**settings, beta=rl["klBeta"], num_generations=rl["generations"],
                          max_completion_length=rl["maxCompletionLength"],
                          temperature=1.0 if greedy else rl["temperature"],
                          generation_kwargs={"do_sample": False} if greedy else None,
                          importance_sampling_level=rl["importanceSampling"],
                          reward_weights=[t["weight"] for t in terms],
                          multi_objective_aggregation="normalize_then_sum"
                          if config["reward"]["aggregation"] == "normalizeThenSum" else "sum_then_normalize",
                          shuffle_dataset=True, **extra)

    def trainer(self, model, args, tokenizer, peft_config, train_dataset, eval_dataset, callbacks, config=None,
                workdir=None, rollouts=None):
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

        class RenderedPrompts(GRPOTrainer):
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
        for key, value in logs.items():  # each term's mean and spread: rewards/<name>/mean -> reward:<name>
            if key.startswith("rewards/") and key.endswith(("/mean", "/std")):
                name, figure = key[len("rewards/"):].rsplit("/", 1)
                # None when the term scored no completion of the update (a judge that gave no score, a bundle
                # that failed on every one): TRL logs no number then
                number = None if value is None else float(value)
                values[f"reward:{name}" + ("" if figure == "mean" else ":std")] = \
                    number if number is not None and math.isfinite(number) else None
        return values

    def results(self, config: dict[str, Any], last: dict[str, float]) -> dict[str, Any]:
        """The run's last rollout figures: reward (and per term), KL, the share of groups whose rewards do not vary."""
        rl = config["rlHyperparams"]
        terms = {t["name"]: last.get(f"reward:{t['name']}") for t in config["reward"]["terms"]}
        return {"rollouts": {"reward": last.get("reward"), "rewardStd": last.get("rewardStd"), "terms": terms,
                             "kl": last.get("kl"), "zeroVarianceShare": last.get("zeroVarianceShare"),
                             "completionLength": last.get("completionLength"),
                             "clippedShare": last.get("clippedShare"), "klBeta": rl["klBeta"],
                             "temperature": rl["temperature"], "generations": rl["generations"],
                             "importanceSampling": rl["importanceSampling"]}}


class Grpo(Reinforcement):
    name = "grpo"


class Gspo(Reinforcement):
    name = "gspo"
    importance_sampling = "sequence"


GRPO, GSPO = Grpo(), Gspo()
