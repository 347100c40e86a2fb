"""A judge reward term's model in the training worker: the judge (a base model, or an adapter over it; its base may
differ from the run's) loaded lazily with Transformers on the device the run trains on, asked greedily with a small
token budget (`JUDGE_MAX_NEW_TOKENS`) by the chat core's generator, its prompts rendered through `optimize.chat` with
the judge's own tokenizer and chat template — as an evaluation's `model:REF` grader asks it.

`term_member(term)` builds any resolved reward term's scoring member: a judge term gets a `JudgeModel` as its
`ask`; the run's worker has put the judge's base model block (`judgeModel`) and its adapter's local folder
(`judgeAdapterPath`) on the term.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from optimize.scoring.judge import JUDGE_MAX_NEW_TOKENS

BATCH = 8  # conversations asked together


class JudgeModel:
    """`ask`: the judge's reply text to each conversation (system and user messages), in order. Nothing is loaded
    until the first call; `release()` drops the model."""

    def __init__(self, model: dict[str, Any], adapter: str | Path | None = None,
                 max_new_tokens: int = JUDGE_MAX_NEW_TOKENS, batch_size: int = BATCH) -> None:
        self.spec, self.adapter = model, adapter
        self.max_new_tokens, self.batch_size = max_new_tokens, batch_size
        self._loaded: tuple[Any, Any] | None = None

    def _load(self):
        if self._loaded is not None:
            return self._loaded
        from optimize.chat.families import content_as_parts, template_kwargs
        from optimize.chat.generation import TransformersGenerator
        from optimize.chat.render import ChatRenderer

        spec = self.spec
        if not spec.get("path") or not Path(spec["path"]).is_dir():
            raise RuntimeError(f"the judge's base model {spec.get('id')} is not in this host's model cache")
        corrected = spec["family"] if spec.get("chatTemplate") == "corrected" else None
        renderer = ChatRenderer.from_pretrained(spec["path"], template_kwargs(spec["family"]),
                                                corrected_family=corrected, parts=content_as_parts(spec["family"]))
        # on the device this process trains on: half precision on a GPU, fp32 on the cpu
        self._loaded = renderer, TransformersGenerator(spec["path"], self.adapter)
        return self._loaded

    def __call__(self, conversations: list[list[dict[str, str]]]) -> list[str]:
        renderer, generator = self._load()
        prompts = [renderer.tokenizer(renderer.text(messages, None, generation_prompt=True),
                                      add_special_tokens=False)["input_ids"] for messages in conversations]
        return [answer.text for answer in generator.generate(prompts, self.max_new_tokens, self.batch_size)]

    def release(self) -> None:
        self._loaded = None


def term_member(term: dict[str, Any], where: str = ""):
    """The scoring member of a resolved reward term as the worker holds it (a bundle's local path, a judge's model
    and adapter folder added to it)."""
    from optimize.scoring.terms import build_member, member_spec

    spec = member_spec(term)
    if term.get("kind") == "judge":
        if not term.get("judgeModel"):
            raise RuntimeError(f"{where or 'the judge term'} {term.get('name')}: the judge's base model was not "
                               "given to this worker")
        judge = JudgeModel(term["judgeModel"], term.get("judgeAdapterPath"))
        return build_member(spec, where=where, judge=judge, judge_label=term.get("judgeReference"),
                            release=judge.release)
    source = Path(term["bundlePath"]) if term.get("bundlePath") else None
    return build_member(spec, source, where=where)
