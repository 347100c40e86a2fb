"""The smoke check (`config.smoke`): before a run trains in full, it trains the first `rows` training rows for
`steps` updates with the same recipe, answers those rows' prompts with that adapter (greedy, rendered by the one
chat core as the run renders them), and scores the text answers — with the run's reward terms (grpo, gspo) or the
smoke's grader (sft; default jsonFieldMatch against the row's own answer). A row whose answer calls tools is left
out of the scoring and counted.

It fails, ending the run before any full-run update, when the slice's loss is not finite, when no answer could be
scored, or when the mean score is below `minScore`. Its adapter is thrown away: the run then trains from the start.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optimize.schemas.resolved import ResolvedConfig
from optimize.training.engines import harness
from optimize.training.methods import method_for


class SmokeFailed(Exception):
    def __init__(self, report: dict[str, Any]) -> None:
        super().__init__(report["reason"])
        self.report = report


@dataclass
class _QuietHooks:
    """The slice reports nothing of its own: it only passes on a stop or a pause, and keeps its final save."""

    outer: Any
    saved_to: Path | None = None
    losses: list[float] = field(default_factory=list)

    def started(self, total_steps, checks, from_step) -> None: ...
    def step(self, step, total_steps) -> None: ...

    def metric(self, kind, step, values) -> None:
        if "loss" in values:
            self.losses.append(values["loss"])

    def saved(self, step, directory, epoch, final, epoch_end) -> None:
        if final:
            self.saved_to = directory

    def should_stop(self) -> bool:
        return self.outer.should_stop()

    def pause(self) -> str | None:
        return None  # a pause waits for the full run's first update


def smoke_check(model_dir: str, config: ResolvedConfig, train_rows: Path, rows: list[dict[str, Any]], renderer,
                workdir: Path, hooks) -> dict[str, Any]:
    """Train the slice, answer and score it; the report (status passed), or SmokeFailed carrying it."""
    smoke = config.smoke
    method = method_for(config.method)
    sliced = config.with_loop(max_steps=smoke.steps).model_copy(update={"smoke": None})
    slice_path = _slice(train_rows, len(rows), workdir / "smoke-rows.parquet")
    quiet = _QuietHooks(hooks)
    harness.train(model_dir, sliced, None, slice_path, len(rows), None, workdir / "smoke", quiet)
    report = {"status": "passed", "rows": len(rows), "steps": smoke.steps, "leftOut": 0, "scored": 0,
              "meanScore": None, "minScore": smoke.min_score,
              "loss": quiet.losses[-1] if quiet.losses else None, "reason": None}
    if any(not math.isfinite(loss) for loss in quiet.losses):
        return _failed(report, f"the slice's loss is not finite ({quiet.losses[-1]}) after {smoke.steps} "
                               "updates; lower the learning rate")
    samples, left_out = _samples(rows)
    report["leftOut"] = left_out
    if not samples:
        return _failed(report, f"none of the slice's {len(rows)} rows ends in a text answer to score "
                               f"({left_out} answer(s) call tools)")
    answers = _answer(model_dir, quiet.saved_to, renderer, samples, method.smoke_answer_tokens(config))
    answered = [sample.__class__(prompt=sample.prompt, completion=answer, expected=sample.expected,
                                 fields=sample.fields) for sample, answer in zip(samples, answers, strict=True)]
    scores = _score(method.smoke_terms(config), answered)
    values = [value for value in scores if value is not None]
    report["scored"] = len(values)
    if not values:
        return _failed(report, f"none of the {len(samples)} answers could be scored")
    report["meanScore"] = round(sum(values) / len(values), 6)
    if smoke.min_score is not None and report["meanScore"] < smoke.min_score:
        return _failed(report, f"the answers' mean score {report['meanScore']:.4f} is below smoke.minScore "
                               f"{smoke.min_score:g}")
    return report


def _failed(report: dict[str, Any], reason: str) -> dict[str, Any]:
    report.update(status="failed", reason=reason)
    raise SmokeFailed(report)


def _slice(train_rows: Path, count: int, target: Path) -> Path:
    import pyarrow.parquet as pq

    pq.write_table(pq.read_table(train_rows).slice(0, count), target)
    return target


def _samples(rows: list[dict[str, Any]]):
    from optimize.chat.normalize import normalize_messages
    from optimize.scoring import Sample

    samples, left_out = [], 0
    for row in rows:
        messages = normalize_messages(row["messages"])
        answer = messages[-1]
        if answer.get("role") != "assistant" or answer.get("tool_calls"):
            left_out += 1
            continue
        content = answer.get("content")
        text = "".join(p.get("text", "") for p in content if isinstance(p, dict)) if isinstance(content, list) \
            else content or ""
        fields = {key: value for key, value in row.items() if key not in ("messages", "tools")}
        samples.append(Sample(prompt=messages[:-1], completion="", expected=text, fields=fields))
    return samples, left_out


def _answer(model_dir: str, adapter: Path | None, renderer, samples, max_new_tokens: int) -> list[str]:
    """Greedy answers of the base model with the slice's adapter, each prompt rendered with the generation prompt
    (and without its tools, as the run renders its rows' prompts for scoring)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if adapter is not None:
        model = PeftModel.from_pretrained(model, str(adapter))
    model.eval()
    tokenizer = renderer.tokenizer
    answers = []
    with torch.no_grad():
        for sample in samples:
            text = renderer.text(sample.prompt, None, generation_prompt=True)
            ids = torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]])
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                 do_sample=False, pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id)
            answers.append(tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True))
    return answers


def _score(terms: list[dict[str, Any]], samples) -> list[float | None]:
    """Each answer's score: the weighted sum of the method's smoke terms (a reinforcement run's reward terms, or the
    smoke's grader)."""
    from optimize.training.methods.judging import term_member

    totals: list[float | None] = [0.0] * len(samples)
    for term in terms:
        member = term_member(term)
        try:
            scores = member.score(samples)
        finally:
            member.close()
        for index, score in enumerate(scores):
            if score.value is None or totals[index] is None:
                totals[index] = None
            else:
                totals[index] += term.get("weight", 1.0) * score.value
    return totals

