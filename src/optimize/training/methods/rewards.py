"""A reinforcement run's reward terms as TRL reward functions: one function per term of `config.reward.terms`
(named by the term, so TRL logs `rewards/<name>/mean` and `/std`), each scoring a batch of completions with its
`optimize.scoring` member against what the prompt's row says (`sample`: its prompt messages, its own final
answer, its other fields).

A term that does not apply to a completion (a missing reference) scores None, which TRL leaves out of that
term's mean; a scoring bundle's error for one completion (an exception, a time or memory limit) scores None too
and is counted, never a crash of the run. A term's `clip` bounds its scores.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def reward_functions(config: dict[str, Any], workdir: Path | None) -> list[Callable[..., list[float | None]]]:
    from optimize.scoring.samples import Sample
    from optimize.scoring.terms import build_member

    functions = []
    for term in config["reward"]["terms"]:
        source = Path(term["bundlePath"]) if term.get("bundlePath") else None
        member = build_member({k: v for k, v in term.items() if k not in ("bundlePath", "bundleSha256")}, source)
        functions.append(_as_reward(term, member, Sample))
    return functions


def _as_reward(term: dict[str, Any], member, sample_type) -> Callable[..., list[float | None]]:
    low, high = term.get("clip") or (None, None)

    def reward(prompts: list[str], completions: list[Any], sample: list[str], **_: Any) -> list[float | None]:
        samples = []
        for text, row in zip(completions, sample, strict=True):
            read = json.loads(row)
            samples.append(sample_type(prompt=read["prompt"], completion=_completion_text(text),
                                       expected=read["expected"], fields=read["fields"]))
        values = []
        for score in member.score(samples):
            value = score.value
            if value is not None and low is not None:
                value = min(max(value, low), high)
            values.append(value)
        return values

    reward.__name__ = term["name"]
    reward.member = member  # noqa: B010 - kept so the run can close a bundle's process
    return reward


def _completion_text(completion: Any) -> str:
    """TRL hands a text prompt's completion as a string (a conversational one as messages)."""
    if isinstance(completion, str):
        return completion
    return "".join(message.get("content") or "" for message in completion if isinstance(message, dict))
