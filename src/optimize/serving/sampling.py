"""How a row's next-token logits are shaped before its token is picked, beyond temperature and top_p: OpenAI's
`logit_bias`, `presence_penalty` and `frequency_penalty` (on the tokens the answer has generated), and vLLM's
`repetition_penalty` (on the prompt's tokens and the answer's, as Transformers and vLLM apply it), `top_k` and
`min_p`. Read from a request (`read_shaping`, each value refused naming its field), applied per row by the batcher
(`shaped`), so rows with different settings decode in one batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from optimize.core.errors import ParamError

MOST_LOGIT_BIAS = 300  # entries, as OpenAI allows


class ShapingError(ParamError):
    """A sampling value out of its range; `param` names the field."""


@dataclass(frozen=True)
class Shaping:
    top_k: int = 0  # 0: every token
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[int, float] = field(default_factory=dict)

    @property
    def shapes(self) -> bool:
        return self != Shaping()

    @property
    def filters(self) -> bool:
        """Whether it leaves tokens out of sampling (top_k, min_p), which greedy decoding does not need."""
        return self.top_k > 0 or self.min_p > 0


def _number(body: dict[str, Any], name: str, low: float, high: float, default: float, low_open: bool = False) -> float:
    value = body.get(name)
    if value is None:
        return default
    bad = isinstance(value, bool) or not isinstance(value, (int, float)) or not (
        (low < value if low_open else low <= value) and value <= high)
    if bad:
        raise ShapingError(f"{name} must be a number {'above' if low_open else 'from'} {low:g} "
                           f"{'and at most' if low_open else 'to'} {high:g}", name)
    return float(value)


def read_shaping(body: dict[str, Any]) -> Shaping:
    """The shaping a request asks for (OpenAI's and vLLM's fields); a field left out or null takes its default."""
    top_k = body.get("top_k")
    if top_k is None or top_k == -1:
        top_k = 0
    if type(top_k) is not int or top_k < 0:
        raise ShapingError("top_k must be a whole number: 0 or -1 for every token, else how many of the likeliest "
                           "are kept", "top_k")
    bias = body.get("logit_bias") or {}
    if not isinstance(bias, dict) or len(bias) > MOST_LOGIT_BIAS:
        raise ShapingError(f"logit_bias must map at most {MOST_LOGIT_BIAS} token ids to a bias from -100 to 100",
                           "logit_bias")
    biases: dict[int, float] = {}
    for key, value in bias.items():
        if not str(key).isdigit() or isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not -100 <= value <= 100:
            raise ShapingError(f"logit_bias maps token ids to a bias from -100 to 100; {key!r}: {value!r} is not one",
                               "logit_bias")
        biases[int(key)] = float(value)
    return Shaping(top_k=top_k, min_p=_number(body, "min_p", 0, 1, 0.0),
                   repetition_penalty=_number(body, "repetition_penalty", 0, 2, 1.0, low_open=True),
                   presence_penalty=_number(body, "presence_penalty", -2, 2, 0.0),
                   frequency_penalty=_number(body, "frequency_penalty", -2, 2, 0.0), logit_bias=biases)


def check_vocabulary(shaping: Shaping, vocabulary: int) -> None:
    """A biased token the model does not have is refused naming logit_bias."""
    outside = next((token for token in shaping.logit_bias if token >= vocabulary), None)
    if outside is not None:
        raise ShapingError(f"logit_bias names token id {outside}, outside the model's vocabulary (0 to "
                           f"{vocabulary - 1:,})", "logit_bias")


def shaped(torch, logits, shaping: Shaping, prompt: list[int], generated: list[int]):
    """One row's logits (a 1-d float tensor) with the biases and penalties applied; `generated`: the answer's tokens
    so far."""
    logits = logits.clone()
    if shaping.logit_bias:
        ids = torch.tensor(list(shaping.logit_bias), device=logits.device)
        logits[ids] += torch.tensor(list(shaping.logit_bias.values()), device=logits.device, dtype=logits.dtype)
    if shaping.repetition_penalty != 1.0:
        seen = torch.tensor(sorted(set(prompt) | set(generated)), device=logits.device, dtype=torch.long)
        values = logits[seen]
        logits[seen] = torch.where(values > 0, values / shaping.repetition_penalty,
                                   values * shaping.repetition_penalty)
    if generated and (shaping.presence_penalty or shaping.frequency_penalty):
        counts = torch.bincount(torch.tensor(generated, device=logits.device), minlength=logits.shape[0])
        counts = counts[:logits.shape[0]].to(logits.dtype)
        logits -= shaping.frequency_penalty * counts + shaping.presence_penalty * (counts > 0).to(logits.dtype)
    return logits


def filtered(torch, scaled, shaping: Shaping):
    """Temperature-scaled logits with the tokens top_k and min_p leave out at -inf (as vLLM filters, after the
    temperature)."""
    if shaping.top_k and shaping.top_k < scaled.shape[0]:
        scaled = scaled.masked_fill(scaled < scaled.topk(shaping.top_k).values[-1], float("-inf"))
    if shaping.min_p:
        probabilities = torch.softmax(scaled, dim=-1)
        scaled = scaled.masked_fill(probabilities < shaping.min_p * probabilities.max(), float("-inf"))
    return scaled
