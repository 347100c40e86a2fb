"""Direct preference optimization: preference pairs rendered by `optimize.chat` (`training.prep.pairs`), trained with
TRL's DPOTrainer and a PEFT LoRA adapter, the adapter switched off being the reference model, so no second copy
of the model is held. It owns the plan's `preference` section.

Pairs arrive as prompt, chosen and rejected token ids, so TRL's own templating and tokenization are skipped: the
pairs train exactly as the analysis measured them.

Liger's fused DPO loss (which keeps the logits of all but one pair of a pass out of device memory) needs a GPU:
on the cpu profile the run says so in its settings and trains with TRL's own loss.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from optimize.core.errors import Refused
from optimize.training.methods.base import TRAINER_METRICS, Method

if TYPE_CHECKING:
    from optimize.schemas.plans import Hyperparams, RunConfig
    from optimize.schemas.resolved import ResolvedDpo

# TRL's preference log keys -> Optimize's metric names (preference accuracy and reward margin, per update)
PREFERENCE_METRICS = {"rewards/accuracies": "preferenceAccuracy", "rewards/margins": "rewardMargin",
                      "rewards/chosen": "rewardChosen", "rewards/rejected": "rewardRejected"}


class Dpo(Method):
    name = "dpo"
    dataset_kind = "preference"
    devices = 8  # data-parallel: a rank per device of one node (training.engines.distributed)
    section = "preference"
    columns = ("prompt_ids", "chosen_ids", "rejected_ids")
    metric_names = {**TRAINER_METRICS, **PREFERENCE_METRICS}
    reference_check = False  # the check compares supervised batches; a pair batch has no labels to compare on
    liger_setting = "preference.fusedLoss (Liger's fused DPO loss)"

    def admit(self, config) -> None:
        # a pair is kept or left out whole: cutting or trimming it would change what is preferred
        if config.data.truncation not in ("error", "drop"):
            raise Refused(f"data.truncation: {config.data.truncation} applies to chat rows; a dpo run keeps or leaves "
                          "out whole pairs", hint="set data.truncation to error or drop")

    def admit_smoke(self, config: RunConfig) -> None:
        raise Refused("a dpo run takes no smoke check (it has no answers of its own to score)",
                      hint="remove config.smoke")

    def sequences_per_row(self, trained_with: Hyperparams) -> int:
        return 2  # a pass holds each pair's chosen and rejected answers

    def gradient_checkpointing(self, on_cpu: bool) -> bool | None:
        # a pass holds chosen and rejected answers: on a GPU the estimate counts both; on the cpu they are recomputed
        return True if on_cpu else None

    def resolve(self, config: RunConfig, shared: dict[str, Any], on_cpu: bool) -> tuple[ResolvedDpo, list[str]]:
        """Which loss the run computes: Liger's fused loss where a pass holds more than one pair (by default at a
        maxSeqLength of 1024 or less) and a GPU runs it; TRL's own otherwise, said in the run's settings."""
        from optimize.schemas.resolved import ResolvedDpo, ResolvedPreference

        preference = config.preference
        several = config.hyperparams.training.batch_size > 1
        wanted = preference.fused_loss if preference.fused_loss is not None else \
            several and config.max_seq_length <= 1024
        resolved = ResolvedPreference(beta=preference.beta, loss_type=preference.loss_type,
                                      fused_loss=bool(wanted) and not on_cpu)
        warnings = ["Liger's fused DPO loss needs a GPU; this run on the cpu profile computes TRL's own "
                    f"{preference.loss_type} loss"] if wanted and on_cpu else []
        return ResolvedDpo(**{**shared, "preference": resolved}, method=self.name, hyperparams=config.hyperparams,
                           rl_hyperparams=config.rl_hyperparams, reward=config.reward), warnings

    def fitter(self, renderer, config: ResolvedDpo):
        from optimize.training.prep.pairs import PairFitter

        return PairFitter(renderer, config.max_seq_length, config.data.truncation)

    def columns_of(self, pair) -> tuple[list[int], ...]:
        return pair.prompt_ids, pair.chosen_ids, pair.rejected_ids

    def arguments(self, config: ResolvedDpo, common: dict[str, Any], cuda: bool):
        import importlib.util

        from trl import DPOConfig

        preference = config.preference
        fused = preference.fused_loss and cuda
        if fused and importlib.util.find_spec("liger_kernel") is None:  # said, never fallen back from silently
            raise RuntimeError("the run computes Liger's fused DPO loss (preference.fusedLoss), and liger-kernel is "
                               "not installed on this training machine; install liger-kernel there, or set "
                               "preference.fusedLoss: false to compute TRL's own loss")
        return DPOConfig(**common, beta=preference.beta, loss_type=[preference.loss_type],
                         max_length=config.max_seq_length, use_liger_kernel=fused)

    def trainer(self, model, args, tokenizer, peft_config, train_dataset, eval_dataset, callbacks, config=None,
                workdir=None):
        from trl import DPOTrainer

        class PreparedPairs(DPOTrainer):
            """Pairs come tokenized (prompt_ids, chosen_ids, rejected_ids): nothing to extract, template or
            tokenize."""

            def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
                return dataset

        from optimize.training.prep.image_batches import image_collator

        # pairs with images: their pixels are prepared batch by batch, for the chosen and the rejected answers
        collator = image_collator(model.config.name_or_path, tokenizer.pad_token_id, train_dataset, eval_dataset,
                                  pairs=True)
        return PreparedPairs(model=model, args=args, processing_class=tokenizer, peft_config=peft_config,
                             train_dataset=train_dataset, eval_dataset=eval_dataset, callbacks=callbacks,
                             data_collator=collator)

    def results(self, config: ResolvedDpo, last: dict[str, float]) -> dict[str, Any]:
        """The run's last preference accuracy and reward margin, and the loss it computed."""
        preference = config.preference
        return {"preference": {"accuracy": last.get("preferenceAccuracy"), "rewardMargin": last.get("rewardMargin"),
                               "lossType": preference.loss_type, "beta": preference.beta,
                               "loss": "liger-fused" if preference.fused_loss else "trl"}}


DPO = Dpo()
