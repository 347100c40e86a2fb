"""Supervised fine-tuning: chat rows rendered and masked by `optimize.chat` (input ids and labels, -100 where no
token trains), trained with TRL's SFTTrainer.

TRL's own rendering is skipped (`skip_prepare_dataset`), so what trains is exactly what the analysis measured.
Packed rows (`config.packing`: the worker packs them, `training.prep.packing`) train through TRL's padding-free
collator, each row attending only to itself (`workloads.packing`).
The supervised run is what the reference start check is made for: its first batch is compared with plain
Transformers before the first update.

Liger kernels (`config.liger`, stated or a default kernel of the resolution) reach TRL through its supported path
on a GPU: `use_liger_kernel` with the kernels named in `liger_kernel_config` (Liger applies each to the model's
family where it has one, and leaves a kernel not named at its own default). A dpo or grpo run does not take them
this way: there TRL reads `use_liger_kernel` as its fused loss (`preference.fusedLoss` for dpo).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from optimize.core.errors import Refused
from optimize.training.methods.base import Method
from optimize.workloads.packing import packs_by_default

if TYPE_CHECKING:
    from optimize.schemas.plans import RunConfig
    from optimize.schemas.resolved import ResolvedSft


class Sft(Method):
    name = "sft"
    loss_compared = True
    dataset_kind = "chat"
    prepared_rows = True  # token ids and loss masks its owner made: trained as given (chat/prepared)
    devices = 8  # data-parallel: a rank per device of one node (training.engines.distributed)
    columns = ("input_ids", "labels")
    liger_kernels = True
    adapters = ("lora", "full", "qlora")
    shares_base = True

    def admit_liger(self, config: RunConfig) -> None:
        """It takes Liger's layer kernels, but not the fused cross entropy, which TRL's own loss stands for."""
        if config.liger.get("fused_linear_cross_entropy"):
            raise Refused("config.liger.fused_linear_cross_entropy would replace the fused LM head TRL's supervised "
                          "trainer computes its loss with (in chunks: the full logits are never held)",
                          hint="remove config.liger.fused_linear_cross_entropy, or set it to false")

    def packing(self, stated: bool | None, on_cpu: bool, attention: str, images: bool) -> bool:
        """Stated, or on where the attention implementation reads packed rows (`workloads.packing`); never with
        images, whose pixels go with their row."""
        if stated and images:
            raise Refused("config.packing would pack rows that name images, whose pixels go with their own row",
                          hint="remove config.packing, or set it to false")
        return packs_by_default(self.name, on_cpu, attention, images) if stated is None else stated

    def resolve(self, config: RunConfig, shared: dict[str, Any], on_cpu: bool) -> tuple[ResolvedSft, list[str]]:
        from optimize.schemas.resolved import ResolvedSft

        attention = shared["model"].attention_implementation
        warnings = [] if not shared.get("packing") or on_cpu or packs_by_default(self.name, on_cpu, attention, False) \
            else [f"config.packing under {attention} on a GPU keeps each row to itself through a mask as long as the "
                  "packed batch, which costs memory and time that flash or flex attention does not "
                  "(config.model.attentionImplementation: flex_attention)"]
        return ResolvedSft(**shared, method=self.name, hyperparams=config.hyperparams,
                           rl_hyperparams=config.rl_hyperparams, reward=config.reward), warnings

    def fitter(self, renderer, config: ResolvedSft):
        from optimize.chat.render import LossPolicy
        from optimize.training.prep.data_fit import Fitter

        loss = config.loss
        policy = LossPolicy(loss.assistant_turns, loss.train_on_tool_calls, loss.explicit_loss_mask_column)
        return Fitter(renderer, policy, config.max_seq_length, config.data.truncation)

    def columns_of(self, rendered) -> tuple[list[int], ...]:
        # a token the mask leaves out is labelled -100, which the loss ignores
        return rendered.input_ids, [t if m else -100
                                    for t, m in zip(rendered.input_ids, rendered.loss_mask, strict=True)]

    def check_fit(self, fit, reference: str) -> None:
        from optimize.training.prep.data_fit import require_masks

        require_masks(fit, reference)

    def arguments(self, config: ResolvedSft, common: dict[str, Any], cuda: bool):
        from trl import SFTConfig

        # packed rows (the worker packed them: `training.prep.packing`) go through TRL's padding-free collator,
        # which restarts each row's positions from their seq_lengths and leaves out the attention mask
        packed = {"packing": True, "packing_strategy": "bfd", "padding_free": True} if config.packing else {}
        return SFTConfig(**common, max_length=config.max_seq_length, dataset_kwargs={"skip_prepare_dataset": True},
                         **packed, **liger_arguments(config.liger, cuda))

    def trainer(self, model, args, tokenizer, peft_config, train_dataset, eval_dataset, callbacks, config=None,
                workdir=None):
        from trl import SFTTrainer

        from optimize.training.prep.image_batches import image_collator

        # rows with images: their pixels are prepared batch by batch, beside TRL's padding of the tokens
        collator = image_collator(model.config.name_or_path, tokenizer.pad_token_id, train_dataset, eval_dataset)
        return SFTTrainer(model=model, args=args, processing_class=tokenizer, peft_config=peft_config,
                          train_dataset=train_dataset, eval_dataset=eval_dataset, callbacks=callbacks,
                          data_collator=collator)


def liger_arguments(liger: dict[str, bool], cuda: bool) -> dict[str, Any]:
    """TRL's Liger settings for a run's `config.liger`: on a GPU, when any kernel is on, every kernel named with its
    setting; none on the cpu (admission refuses `config.liger` there) or when all are off."""
    if not cuda or not any(liger.values()):
        return {}
    import importlib.util

    if importlib.util.find_spec("liger_kernel") is None:  # said, never fallen back from silently
        raise RuntimeError("the run uses Liger's kernels (config.liger), and liger-kernel is not installed on this "
                           "training machine; install it there (the gpu extra), or set each kernel in config.liger to "
                           "false")
    return {"use_liger_kernel": True, "liger_kernel_config": {name: bool(on) for name, on in sorted(liger.items())}}


SFT = Sft()
