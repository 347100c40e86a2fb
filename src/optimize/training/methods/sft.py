"""Supervised fine-tuning: chat rows rendered and masked by `optimize.chat` (input ids and labels, -100 where no
token trains), trained with TRL's SFTTrainer.

TRL's own rendering is skipped (`skip_prepare_dataset`), so what trains is exactly what the analysis measured.
The supervised run is what the reference start check is made for: its first batch is compared with plain
Transformers before the first update.
"""

from __future__ import annotations

from typing import Any

from optimize.training.methods.base import Method


class Sft(Method):
    name = "sft"
    dataset_kind = "chat"
    columns = ("input_ids", "labels")

    def fitter(self, renderer, config: dict[str, Any]):
        from optimize.chat.render import LossPolicy
        from optimize.training.prep.data_fit import Fitter

        loss = config["loss"]
        policy = LossPolicy(loss["assistantTurns"], loss["trainOnToolCalls"], loss["explicitLossMaskColumn"])
        return Fitter(renderer, policy, config["maxSeqLength"], config["data"]["truncation"])

    def columns_of(self, rendered) -> tuple[list[int], ...]:
        # a token the mask leaves out is labelled -100, which the loss ignores
        return rendered.input_ids, [t if m else -100
                                    for t, m in zip(rendered.input_ids, rendered.loss_mask, strict=True)]

    def check_fit(self, fit, reference: str) -> None:
        from optimize.training.prep.data_fit import require_masks

        require_masks(fit, reference)

    def arguments(self, config: dict[str, Any], common: dict[str, Any], cuda: bool):
        from trl import SFTConfig

        return SFTConfig(**common, max_length=config["maxSeqLength"], dataset_kwargs={"skip_prepare_dataset": True})

    def trainer(self, model, args, tokenizer, peft_config, train_dataset, eval_dataset, callbacks, config=None,
                workdir=None):
        from trl import SFTTrainer

        return SFTTrainer(model=model, args=args, processing_class=tokenizer, peft_config=peft_config,
                          train_dataset=train_dataset, eval_dataset=eval_dataset, callbacks=callbacks)


SFT = Sft()
