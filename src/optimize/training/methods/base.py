"""What a training method declares: the plan section it owns, the dataset kind its runs read, its admission rules
(its smoke check, Liger kernels, stopWhen), the resolved config it makes (`resolve`: its model in
`schemas.resolved`, which every later step reads by attribute), how the worker prepares its rows, its TRL recipe
(arguments and trainer: TRL's config of the method from the resolved config's fields), its smoke check's answers,
its metric names and what it adds to a run's results.

The run loop every method shares (model load, LoRA, saves, pause, resume, branches, hooks, start checks) is
`training.engines.harness`; it asks the method only for what differs. A method overrides the defaults here that
do not hold for it. This module is imported by the API at admission, so torch, transformers and TRL are imported
only inside the methods that build a trainer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from optimize.core.errors import Refused
from optimize.workloads.dataset_kinds import HOLDS as HOLDS  # how a refusal names what a dataset holds

if TYPE_CHECKING:
    from optimize.schemas.plans import Hyperparams, RlHyperparams, RunConfig, StopWhen
    from optimize.schemas.resolved import ResolvedConfig, ResolvedTerm

# TRL's log keys every trainer writes -> Optimize's metric names
TRAINER_METRICS = {"loss": "loss", "learning_rate": "learningRate", "grad_norm": "gradNorm", "num_tokens": "tokens",
                   "mean_token_accuracy": "tokenAccuracy", "entropy": "entropy", "epoch": "epoch"}


class Method:
    """A training method; one instance per method in `training.methods.METHODS`."""

    name: ClassVar[str]
    dataset_kind: ClassVar[str]  # the kind of dataset its runs read: chat | preference
    section: ClassVar[str | None] = None  # the plan section it owns (config.<section>), if any
    trained_by: ClassVar[str] = "hyperparams"  # the plan section holding the adapter, optimizer and loop it trains with
    takes_validation: ClassVar[bool] = True  # whether its runs take a validation dataset
    trained: ClassVar[bool] = True  # False: declared (its plans validate) but refused at admission
    engine: ClassVar[str] = "trl"
    devices: ClassVar[int] = 1  # the most devices its engine trains one run on
    prepared_rows: ClassVar[bool] = False  # whether it trains on prepared token rows as well as its dataset_kind
    columns: ClassVar[tuple[str, ...]] = ()  # the token-id columns of its prepared rows
    text_columns: ClassVar[tuple[str, ...]] = ()  # its prepared rows' text columns, after the token-id ones
    metric_names: ClassVar[dict[str, str]] = TRAINER_METRICS  # TRL's log keys -> Optimize's metric names
    reference_check: ClassVar[bool] = True  # whether its first batch can be compared with plain Transformers

    adapters: ClassVar[tuple[str, ...]] = ("lora",)  # what its runs may train (`config.model.adapter`)
    shares_base: ClassVar[bool] = False  # its runs may train beside others on one loaded base (`execution.shareBase`)
    liger_kernels: ClassVar[bool] = False  # whether it takes Liger's layer kernels (`config.liger`, default kernels)
    liger_setting: ClassVar[str] = "none"  # what stands for Liger's kernels in its runs instead, if anything
    rewarded: ClassVar[bool] = False  # its completions are scored by `config.reward`'s terms (checked at a dry run)
    length_checked: ClassVar[bool] = True  # its rows' lengths are checked against the analyses at submission
    loss_compared: ClassVar[bool] = False  # two of its runs' training losses compare window by window (runs compare)

    # --- admission (server): refusals with the words a plan gets, and resolved defaults

    def admit_datasets(self, picks: list[tuple[str, Any]]) -> None:
        """Refuse datasets (field name, DatasetPick or None) this method cannot train on, from what the registry
        counted; runs before the method is known to be trained, so an untrained method's rules still speak."""

    def admit(self, config: RunConfig) -> None:
        """Refuse plan settings this method cannot train under."""

    def admit_smoke(self, config: RunConfig) -> None:
        """A smoke check trains the first rows as they are: no row may be left out or trimmed."""
        if config.data.truncation not in ("error", "right"):
            raise Refused(f"data.truncation: {config.data.truncation} leaves out or trims rows, which a smoke check "
                          "trains as they are", hint="set data.truncation: error, or remove config.smoke")

    def admit_liger(self, config: RunConfig) -> None:
        """`config.liger` turns on Liger's kernels in supervised runs (`Sft` takes them); another method refuses
        them, naming its own Liger setting."""
        if config.liger and any(config.liger.values()):
            raise Refused(f"config.liger turns on Liger's kernels in supervised runs; a {self.name} run does not take "
                          f"them (its Liger setting: {self.liger_setting})", hint="remove config.liger")

    def admit_stop_when(self, stop_when: StopWhen, config: ResolvedConfig) -> None:
        """`execution.stopWhen` watches what only a reinforcement run reports (`Reinforcement` takes it)."""
        raise Refused(f"execution.stopWhen watches a reinforcement run's reward and KL, which a {self.name} run does "
                      "not report", hint="remove execution.stopWhen, or train with method grpo or gspo")

    def check_references(self, terms: list[ResolvedTerm], blobs) -> None:
        """Check what the resolved config names beyond datasets (a reward's scoring bundles import), before a device
        is claimed."""

    def packing(self, stated: bool | None, on_cpu: bool, attention: str, images: bool) -> bool | None:
        """`config.packing` as the run trains it: None for a method that does not pack (`Sft` packs), where a plan
        stating it on is refused."""
        if stated:
            raise Refused(f"config.packing packs a supervised run's rows into maxSeqLength bins; a {self.name} run's "
                          "rows are not packed", hint="remove config.packing")
        return None

    def gradient_checkpointing(self, on_cpu: bool) -> bool | None:
        """model.gradientCheckpointing when the plan leaves it out: a fixed choice, or None where the memory
        estimate decides (on a GPU: on only where the run would not fit without it; `admission.memory`)."""
        return False if on_cpu else None

    def trained_with(self, config: RunConfig) -> Hyperparams | RlHyperparams:
        """The adapter, optimizer and loop a plan trains with, as the plan states them."""
        return config.hyperparams

    def kl_penalty(self, config: ResolvedConfig) -> float:
        """The weight of its KL penalty against a reference policy (0: none; a reinforcement run's `klBeta`)."""
        return 0.0

    def sequences_per_row(self, trained_with: Hyperparams | RlHyperparams) -> int:
        """The sequences one row of a micro-batch forwards (the memory estimate's: `admission.memory`)."""
        return 1

    def generation_share(self, trained_with: Hyperparams | RlHyperparams, on_cpu: bool) -> float:
        """The share of the device an engine generating beside the trained model holds while it generates (the
        memory estimate's); 0: none."""
        return 0.0

    def resolve(self, config: RunConfig, shared: dict[str, Any], on_cpu: bool) -> tuple[ResolvedConfig, list[str]]:
        """The resolved config: `shared` (what admission resolved for every method: datasets, model, kernels...) with
        this method's own settings and defaults; and warnings for the run's settings."""
        raise NotImplementedError(f"method {self.name} is not trained on this deployment")

    # --- rows (worker)

    def fitter(self, renderer, config: ResolvedConfig):
        """The fitter a dataset's rows go through: `fit(row, where)` returns what trains, or None to leave it out;
        `counts` is the dataset's dataFit."""
        raise NotImplementedError(f"method {self.name} prepares no rows")

    def columns_of(self, fitted) -> tuple[Any, ...]:
        """A fitted row's columns: its token ids in the order of `columns`, then its `text_columns`."""
        raise NotImplementedError(f"method {self.name} prepares no rows")

    def check_fit(self, fit, reference: str) -> None:
        """Refuse a dataset whose rows, once all are fitted, cannot train (`reference` names it)."""

    # --- the TRL recipe (engine)

    def arguments(self, config: ResolvedConfig, common: dict[str, Any], cuda: bool):
        """The trainer's arguments (TRL's config of the method): the harness's `common` ones and this method's own."""
        raise NotImplementedError(f"method {self.name} is not trained on this deployment")

    def trainer(self, model, args, tokenizer, peft_config, train_dataset, eval_dataset, callbacks,
                config: ResolvedConfig | None = None, workdir=None):
        """The TRL trainer over prepared rows (already tokenized: TRL's own preparation is skipped); `config` is
        the resolved config, `workdir` the attempt's folder."""
        raise NotImplementedError(f"method {self.name} is not trained on this deployment")

    def metric_values(self, logs: dict[str, Any]) -> dict[str, float]:
        """Optimize's metrics from one of the trainer's log lines (its `metric_names`)."""
        return {name: float(logs[key]) for key, name in self.metric_names.items() if key in logs}

    # --- the smoke check (engine)

    def smoke_answer_tokens(self, config: ResolvedConfig) -> int:
        """How long a smoke check's answers may be."""
        return min(256, config.max_seq_length)

    def smoke_terms(self, config: ResolvedConfig) -> list[dict[str, Any]]:
        """What scores a smoke check's answers: the smoke's grader (a supervised run's)."""
        grader = config.smoke.grader if config.smoke is not None else None
        return [{"kind": grader or "jsonFieldMatch", "weight": 1.0}]

    # --- results

    def results(self, config: ResolvedConfig, last: dict[str, float]) -> dict[str, Any]:
        """What the method adds to the run's results, from the newest value of each training metric."""
        return {}


def not_trained(name: str, trained: list[str]) -> Refused:
    """The refusal a plan naming a method this deployment does not train gets."""
    return Refused(f"method {name} is not trained on this deployment yet; methods {_listed(trained, 'and')} are",
                   hint=f"set config.method: {_listed(trained, 'or')}")


def _listed(names: list[str], conjunction: str) -> str:
    return f" {conjunction} ".join(names) if len(names) <= 2 else \
        f"{', '.join(names[:-1])} {conjunction} {names[-1]}"
