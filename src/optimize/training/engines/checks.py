"""The reference check before a supervised run's first update.

The engine's per-token log-probabilities on the first batch are compared with a plain Transformers forward pass
of the base model, at the run's precision and at fp32. `roundingError` is what the precision alone costs: the
mean difference between plain Transformers at the run's precision and at fp32. Default bounds (release notes):
the mean bound is 3 × roundingError and at least 0.03; the largest-difference bounds are 1.0 and 0.002 for
conversations up to 4096 tokens and grow in proportion to the longer compared conversation. A bound the run
states is kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

BASE_LENGTH = 4096
MEAN_FLOOR = 0.03
MAX_AT_BASE = 1.0
FP32_MAX_AT_BASE = 0.002


def default_bounds(rounding_error: float, longest: int, stated: dict[str, float | None]) -> dict[str, float]:
    scale = max(1.0, longest / BASE_LENGTH)
    return {
        "meanLogprobError": stated.get("mean_logprob_error") or max(3 * rounding_error, MEAN_FLOOR),
        "maxLogprobError": stated.get("max_logprob_error") or MAX_AT_BASE * scale,
        "fp32MaxLogprobError": stated.get("fp32_max_logprob_error") or FP32_MAX_AT_BASE * scale,
    }


def token_logprobs(model: Any, batch: dict[str, Any]):
    """Log-probability of each real next token (flattened), under `model`, without gradients. A padding-free batch
    (packed rows: positions, no attention mask) is forwarded as it trains, each row attending only to itself, and
    the first token of each row is not a next token of the row before it."""
    import torch

    device = next(model.parameters()).device
    input_ids = batch["input_ids"].to(device)
    mask = batch.get("attention_mask")
    positions = batch.get("position_ids") if mask is None else None
    inputs = {"position_ids": positions.to(device)} if positions is not None else \
        {"attention_mask": torch.ones_like(input_ids) if mask is None else mask.to(device)}
    images = {key: batch[key].to(device) for key in ("pixel_values", "pixel_attention_mask") if key in batch}
    if "pixel_values" in images:
        images["pixel_values"] = images["pixel_values"].to(next(model.parameters()).dtype)
    with torch.no_grad():
        # no cache: with one, Transformers would not read packed rows' boundaries from their positions
        logits = model(input_ids=input_ids, **inputs, **images, use_cache=False).logits[:, :-1].float()
    picked = torch.log_softmax(logits, dim=-1).gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    kept = (positions[:, 1:] != 0) if positions is not None else inputs["attention_mask"][:, 1:].bool()
    return picked[kept.to(picked.device)].cpu()


def longest_row(batch: dict[str, Any]) -> int:
    """The longest row of a batch: its real tokens, or, packed, the longest run of positions."""
    mask, positions = batch.get("attention_mask"), batch.get("position_ids")
    if mask is not None:
        return int(mask.sum(dim=1).max())
    return int(positions.max()) + 1 if positions is not None else int(batch["input_ids"].shape[1])


def reference_check(engine_model: Any, load_plain: Callable[[Any], Any], batch: dict[str, Any], dtype: Any,
                    stated: dict[str, float | None], at_fp32: bool = True) -> dict[str, Any]:
    """Run the check; `load_plain(dtype)` gives the base model under plain Transformers at `dtype`. Without `at_fp32`
    (a base quantized to 4 bits, whose weights have no fp32 form) both are compared at the run's precision only."""
    import torch

    started = time.monotonic()
    was_training = engine_model.training
    engine_model.eval()
    try:
        engine = token_logprobs(engine_model, batch)
        plain_model = load_plain(dtype)
        plain = token_logprobs(plain_model, batch)
        if dtype == torch.float32 or not at_fp32:
            plain32, engine32 = plain, engine
        else:
            plain32 = token_logprobs(plain_model.float(), batch)
            engine32 = _at_fp32(engine_model, batch)
        del plain_model
    finally:
        engine_model.train(was_training)
    longest = longest_row(batch)
    rounding = float((plain - plain32).abs().mean())
    measured = {
        "meanLogprobError": float((engine - plain).abs().mean()),
        "maxLogprobError": float((engine - plain).abs().max()),
        "fp32MaxLogprobError": float((engine32 - plain32).abs().max()),
    }
    bounds = default_bounds(rounding, longest, stated)
    over = [name for name, value in measured.items() if value > bounds[name]]
    return {
        "name": "reference",
        "status": "failed" if over else "passed",
        **measured,
        "roundingError": rounding,
        "bounds": bounds,
        "over": over,
        "tokens": int(engine.numel()),
        "longest": longest,
        "seconds": round(time.monotonic() - started, 2),
    }


def _at_fp32(model: Any, batch: dict[str, Any]):
    """The engine's log-probabilities with every parameter at fp32, then each put back at its own dtype."""
    dtypes = {name: p.dtype for name, p in model.named_parameters()}
    model.float()
    try:
        return token_logprobs(model, batch)
    finally:
        for name, parameter in model.named_parameters():
            parameter.data = parameter.data.to(dtypes[name])


def summary(checks: list[dict[str, Any]]) -> dict[str, Any]:
    passed = sum(1 for c in checks if c["status"] != "failed")
    warned = [c for c in checks if c["status"] == "warning"]
    status = "failed" if passed < len(checks) else "warning" if warned else "passed"
    return {"status": status, "passed": passed, "total": len(checks),
            "seconds": round(sum(c["seconds"] for c in checks), 2), "checks": checks}


def failure_reason(check: dict[str, Any]) -> str:
    parts = [f"{name} {check[name]:.4g} against a bound of {check['bounds'][name]:.4g}" for name in check["over"]]
    return ("the reference start check failed before the first update: " + "; ".join(parts)
            + f" (roundingError {check['roundingError']:.4g}). The engine's log-probabilities differ from plain "
              "Transformers; set checks.reference bounds only if the difference is expected")
