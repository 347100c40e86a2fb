"""A reinforcement run's reward terms as TRL reward functions: one function per term of `config.reward.terms`
(named by the term, so TRL logs `rewards/<name>/mean` and `/std`), each scoring a batch of completions with its
`optimize.scoring` member against what the prompt's row says (`sample`: its prompt messages, its own final
answer, its other fields).

A term that does not apply to a completion (a missing reference) scores None, which TRL leaves out of that
term's mean; a scoring bundle's error for one completion (an exception, a time or memory limit) scores None too
and is counted, never a crash of the run. A judge term (`kind: judge`) asks the judge model
(`training.methods.judging`) to grade each completion; a reply without a score from 0 to 1 scores None, with the
reply quoted as the error. A term's `clip` bounds its scores.

With a `rollouts` sink, a `RolloutRecorder` keeps a bounded sample of every update's rollouts — the first
`ROLLOUT_GROUPS` prompt groups, every completion of each — with each term's score (and a bundle's error text) and
the weighted total, and hands it to the sink once the batch's last term has scored (`runs rollouts`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from optimize.schemas.resolved import ResolvedReinforcement, ResolvedTerm

ROLLOUT_GROUPS = 2  # prompt groups recorded per update (each with all of its `generations` completions)
ROLLOUT_ITEMS = 16  # at most this many completions recorded per update
ROLLOUT_TEXT = 2000  # characters kept of a prompt, a completion or an error text; longer ones are cut and marked
CUT_MARK = "…"

RolloutSink = Callable[[int, list[dict[str, Any]]], None]  # (update, items)


def reward_functions(config: ResolvedReinforcement, workdir: Path | None, rollouts: RolloutSink | None = None
                     ) -> list[Callable[..., list[float | None]]]:
    """One reward function per term; with `rollouts`, each update's sample of rollouts goes to it (update
    numbered as the trainer counts them: the batch scored at `global_step` N trains update N + 1)."""
    from optimize.scoring.samples import Sample
    from optimize.training.methods.judging import term_member

    terms = config.reward.terms
    recorder = None
    if rollouts is not None:
        recorder = RolloutRecorder([t.name for t in terms], [t.weight for t in terms],
                                   config.rl_hyperparams.generations, rollouts)
    functions = []
    for index, term in enumerate(terms):
        member = term_member(term.member_spec(), f"config.reward.terms[{index}]")
        functions.append(_as_reward(term, member, Sample, index, recorder))
    return functions


def _as_reward(term: ResolvedTerm, member, sample_type, index: int = 0,
               recorder: RolloutRecorder | None = None) -> Callable[..., list[float | None]]:
    low, high = term.clip or (None, None)

    def reward(prompts: list[str], completions: list[Any], sample: list[str], trainer_state: Any = None,
               **_: Any) -> list[float | None]:
        samples = []
        for text, row in zip(completions, sample, strict=True):
            read = json.loads(row)
            samples.append(sample_type(prompt=read["prompt"], completion=_completion_text(text),
                                       expected=read["expected"], fields=read["fields"]))
        values, errors = [], []
        for score in member.score(samples):
            value = score.value
            if value is not None and low is not None:
                value = min(max(value, low), high)
            values.append(value)
            errors.append(score.error)
        if recorder is not None:
            recorder.scored(index, trainer_state, samples, values, errors)
        return values

    reward.__name__ = term.name
    reward.member = member  # noqa: B010 - kept so the run can close a bundle's process
    return reward


class RolloutRecorder:
    """Joins the terms' scores of one batch by position (TRL calls the terms one after another on the same batch)
    and hands the update's bounded sample to the sink when the last term has scored. Recording never fails a
    run: a sink that raises loses that update's record, nothing more."""

    def __init__(self, names: list[str], weights: list[float], generations: int, sink: RolloutSink) -> None:
        self.names, self.weights, self.sink = names, weights, sink
        self.keep = min(ROLLOUT_ITEMS, ROLLOUT_GROUPS * max(1, generations))
        self.generations = max(1, generations)
        self._batch: dict[str, Any] | None = None
        self._recorded: int | None = None  # the newest update recorded (a batch scored again is not)

    def scored(self, index: int, trainer_state: Any, samples: list[Any], values: list[float | None],
               errors: list[str | None]) -> None:
        try:
            self._scored(index, trainer_state, samples, values, errors)
        except Exception:  # noqa: BLE001 - a sample of rollouts is never worth a run
            self._batch = None

    def _scored(self, index: int, trainer_state: Any, samples: list[Any], values: list[float | None],
                errors: list[str | None]) -> None:
        step = int(getattr(trainer_state, "global_step", 0) or 0) + 1
        if index == 0:
            self._batch = None if step == self._recorded else {
                "step": step, "samples": samples[:self.keep], "scores": {}, "errors": {}}
        batch = self._batch
        if batch is None or batch["step"] != step:
            return
        batch["scores"][self.names[index]] = values[:self.keep]
        batch["errors"][self.names[index]] = errors[:self.keep]
        if index == len(self.names) - 1:
            self._batch, self._recorded = None, step
            self.sink(step, self._items(batch))

    def _items(self, batch: dict[str, Any]) -> list[dict[str, Any]]:
        items = []
        for position, sample in enumerate(batch["samples"]):
            scores = {name: _finite(batch["scores"][name][position]) for name in self.names}
            errors = {name: bounded(str(batch["errors"][name][position]))[0]
                      for name in self.names if batch["errors"][name][position]}
            present = [(scores[name], weight) for name, weight in zip(self.names, self.weights, strict=True)
                       if scores[name] is not None]
            prompt, prompt_cut = bounded(_last_user_text(sample.prompt))
            completion, completion_cut = bounded(sample.completion)
            item: dict[str, Any] = {"group": position // self.generations, "prompt": prompt,
                                    "completion": completion, "scores": scores,
                                    "total": sum(v * w for v, w in present) if present else None}
            if errors:
                item["errors"] = errors
            cut = [name for name, was_cut in (("prompt", prompt_cut), ("completion", completion_cut)) if was_cut]
            if cut:
                item["cut"] = cut
            items.append(item)
        return items


def bounded(text: str, limit: int = ROLLOUT_TEXT) -> tuple[str, bool]:
    """`text` kept to `limit` characters, the cut marked with an ellipsis; and whether it was cut. A NUL (which a
    sampled completion may hold, and the server refuses in stored text) is kept as U+FFFD."""
    text = text.replace("\x00", "\ufffd")
    if len(text) <= limit:
        return text, False
    return text[:limit - len(CUT_MARK)] + CUT_MARK, True


def _finite(value: float | None) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    from optimize.scoring.samples import message_text

    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return message_text(message.get("content")) or ""
    return ""


def _completion_text(completion: Any) -> str:
    """TRL hands a text prompt's completion as a string (a conversational one as messages)."""
    if isinstance(completion, str):
        return completion
    return "".join(message.get("content") or "" for message in completion if isinstance(message, dict))
