"""Every loaded adapter's LoRA weights of a layer stacked into one pair of matrices, so that a batch whose rows ask
for different adapters (or the base model) costs two matrix products per layer: the rows' inputs times all the
adapters' A matrices side by side, each row masked to its own adapter's columns, times the B matrices (scaling
folded in) stacked to match. PEFT's mixed-adapter batches (`adapter_names`) instead loop over the adapters present
in each layer (a gather, two products and an indexed add for each), and register and remove a hook on every
module each forward — on a small model that per-call overhead, not arithmetic, was most of a mixed step.

Only plain LoRA on linear layers stacks (no DoRA or other variants, no LoRA bias, nothing on embeddings): where a
loaded adapter has anything else, `stack` answers None and the engine keeps PEFT's mixed batches. A stack is built
for the adapters loaded now; the engine builds a new one after each load or unload (under its lock, never during a
step). Outside `rows(...)` each layer answers exactly as PEFT would (its own forward).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any


class StackedLora:
    def __init__(self, torch, layers: list, stacks: dict[int, tuple[Any, Any, tuple]]) -> None:
        self.torch = torch
        self.layers = layers
        self.stacks = stacks  # id(layer) -> (A: (R, in), B: (out, R) scaled, spans: ((key, start, end), ...))
        self._keys: list[str | None] | None = None  # each row's PEFT adapter key (None: the base) while in rows()
        self._masks: dict[tuple, Any] = {}
        for layer in layers:
            layer.forward = _stacked_forward(self, layer)  # an instance attribute: nn.Module calls it first

    def remove(self) -> None:
        """Give every layer its own forward back."""
        for layer in self.layers:
            layer.__dict__.pop("forward", None)

    @contextmanager
    def rows(self, keys: list[str | None]):
        """Within: each row of a forward uses the adapter of its key (None: none)."""
        self._keys, self._masks = keys, {}
        try:
            yield
        finally:
            self._keys, self._masks = None, {}

    def mask(self, spans: tuple, like) -> Any:
        """(rows, R): 1 in the columns of each row's own adapter; None when no row uses an adapter of this stack."""
        if spans not in self._masks:
            width = spans[-1][2]
            mask = None
            if any(key is not None for key in self._keys):
                where = {key: (start, end) for key, start, end in spans}
                mask = self.torch.zeros((len(self._keys), width), dtype=like.dtype, device=like.device)
                for row, key in enumerate(self._keys):
                    if key in where:
                        mask[row, where[key][0]:where[key][1]] = 1
                if not bool(mask.any()):
                    mask = None
            self._masks[spans] = mask
        return self._masks[spans]


def _stacked_forward(stacked: StackedLora, layer):
    own = type(layer).forward
    functional = stacked.torch.nn.functional

    def forward(x, *args, **kwargs):
        if stacked._keys is None:
            return own(layer, x, *args, **kwargs)
        result = layer.base_layer(x, *args, **kwargs)
        stack = stacked.stacks.get(id(layer))
        if stack is None:
            return result
        a, b, spans = stack
        mask = stacked.mask(spans, a)
        if mask is None:
            return result
        hidden = functional.linear(x.to(a.dtype), a)  # (rows, ..., R)
        hidden = hidden * mask.view(mask.shape[0], *([1] * (hidden.dim() - 2)), mask.shape[1])
        return result + functional.linear(hidden, b).to(result.dtype)

    return forward


def stack(torch, model, keys: list[str]) -> StackedLora | None:
    """A stack of the adapters `keys` over the LoRA layers of `model` (a PEFT-injected model), or None where one of
    them is not plain LoRA on linear layers."""
    from peft.tuners.lora import Linear as LoraLinear
    from peft.tuners.lora import LoraLayer

    layers, stacks = [], {}
    for module in model.modules():
        if not isinstance(module, LoraLayer):
            continue
        present = [key for key in keys if key in module.lora_A]
        if not isinstance(module, LoraLinear):
            if present:
                return None
            continue
        if any(key in module.lora_variant or module.lora_bias.get(key) for key in present):
            return None
        layers.append(module)
        if not present:
            continue
        spans, start = [], 0
        for key in present:
            rank = module.lora_A[key].weight.shape[0]
            spans.append((key, start, start + rank))
            start += rank
        with torch.no_grad():
            a = torch.cat([module.lora_A[key].weight for key in present], dim=0).detach().clone()
            b = torch.cat([module.lora_B[key].weight * module.scaling[key] for key in present], dim=1).detach()
        stacks[id(module)] = (a, b.to(a.dtype).contiguous(), tuple(spans))
    return StackedLora(torch, layers, stacks)
