"""Direct preference optimization with TRL's DPOTrainer and a PEFT LoRA adapter: the adapter switched off is the
reference model, so no second copy of the model is held.

Pairs arrive rendered by `optimize.chat` (`training.pairs`) as prompt, chosen and rejected token ids in Parquet
files, so TRL's own templating and tokenization are skipped: the pairs train exactly as the analysis measured
them. The rest of the run (saves, pause, resume, branches, hooks) is the supervised engine's
(`trl_sft.train`); this module holds what differs: the trainer's arguments, the trainer, the metrics.

Liger's fused DPO loss (which keeps the logits of all but one pair of a pass out of device memory) needs a GPU:
on the cpu profile the run says so in its settings and trains with TRL's own loss.
"""

from __future__ import annotations

from typing import Any

# TRL's log keys -> Optimize's metric names (preference accuracy and reward margin, per update)
METRIC_NAMES = {"rewards/accuracies": "preferenceAccuracy", "rewards/margins": "rewardMargin",
                "rewards/chosen": "rewardChosen", "rewards/rejected": "rewardRejected"}


def arguments(config: dict[str, Any], common: dict[str, Any], fused: bool):
    import importlib.util

    from trl import DPOConfig

    if fused and importlib.util.find_spec("liger_kernel") is None:  # said, never fallen back from silently
        raise RuntimeError("the run computes Liger's fused DPO loss (preference.fusedLoss), and liger-kernel is not "
                           "installed on this training machine; install liger-kernel there, or set "
                           "preference.fusedLoss: false to compute TRL's own loss")

    preference = config["preference"]
    return DPOConfig(**common, beta=preference["beta"], loss_type=[preference["lossType"]],
                     max_length=config["maxSeqLength"], use_liger_kernel=fused)


def trainer(model, args, tokenizer, peft_config, train_dataset, eval_dataset, callbacks):
    from trl import DPOTrainer

    class PreparedPairs(DPOTrainer):
        """Pairs come tokenized (prompt_ids, chosen_ids, rejected_ids): nothing to extract, template or tokenize."""

        def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
            return dataset

    return PreparedPairs(model=model, args=args, processing_class=tokenizer, peft_config=peft_config,
                         train_dataset=train_dataset, eval_dataset=eval_dataset, callbacks=callbacks)
