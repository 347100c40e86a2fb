"""Prompts as a reinforcement run rolls them out: a chat row's messages before its final answer, rendered through
`optimize.chat` with the generation prompt (one beginning-of-sequence token, the base model's template at its
pinned commit), and what its reward reads: the prompt's messages, the row's own final answer (`expected`) and the
row's other fields.

A row that offers tools is refused by line (the run renders no tools into its prompts, so it would train unlike
evaluation and serving), and so is one whose final answer calls tools (rewards compare an answer's text). A prompt
that leaves fewer than `maxCompletionLength` tokens of `maxSeqLength` is over its budget: under
`data.truncation: error` the run fails before training, counting such prompts and naming the first five; under
`drop` they are left out (`dataFit.tooLong`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from optimize.chat.normalize import normalize_messages, row_tools
from optimize.chat.render import ChatRenderer, RenderError
from optimize.training.prep.data_fit import DataFit, RowRefused

NAMED = 5  # over-budget prompts a refusal names


@dataclass(frozen=True)
class RolloutPrompt:
    text: str  # the rendered prompt the policy continues
    length: int  # its tokens
    sample: str  # JSON: {"prompt": messages, "expected": text, "fields": {...}}, what the reward reads


@dataclass
class PromptFitter:
    renderer: ChatRenderer
    limit: int  # maxSeqLength
    completion: int  # maxCompletionLength
    truncation: str
    counts: DataFit = field(default_factory=DataFit)
    over_budget: list[str] = field(default_factory=list)  # where each over-budget prompt is

    @property
    def budget(self) -> int:
        return self.limit - self.completion

    def fit(self, row: dict[str, Any], where: str) -> RolloutPrompt | None:
        if row_tools(row):
            raise RowRefused(f"{where}: the row offers tools; a reinforcement run renders no tools into the prompts "
                             "it rolls out, so it would train unlike evaluation and serving; remove tools from every "
                             "row of a reinforcement dataset")
        messages = normalize_messages(row["messages"])
        answer = messages[-1]
        if answer.get("tool_calls"):
            raise RowRefused(f"{where}: the final answer calls tools; a reinforcement run's reward compares an "
                             "answer's text, so its rows end in a text answer")
        prompt = messages[:-1]
        try:
            text = self.renderer.text(prompt, None, generation_prompt=True)
        except RenderError as error:
            raise RowRefused(f"{where}: {error}") from None
        length = len(self.renderer.tokenizer(text, add_special_tokens=False)["input_ids"])
        if length > self.budget:
            if self.truncation == "drop":
                self.counts.too_long += 1
                return None
            self.over_budget.append(f"{where} ({length} tokens)")
            return None
        self.counts.rows += 1
        fields = {key: value for key, value in row.items() if key not in ("messages", "tools")}
        sample = json.dumps({"prompt": prompt, "expected": _text(answer), "fields": fields}, ensure_ascii=False)
        return RolloutPrompt(text, length, sample)

    def check(self, reference: str) -> None:
        """Refuse the dataset when any prompt is over its budget (under data.truncation: error)."""
        if self.over_budget:
            named = "; ".join(self.over_budget[:NAMED])
            raise RowRefused(f"{reference}: {len(self.over_budget)} prompt(s) leave fewer than maxCompletionLength "
                             f"{self.completion} tokens of maxSeqLength {self.limit} (a prompt may hold at most "
                             f"{self.budget} tokens): {named}; raise maxSeqLength, lower maxCompletionLength, shorten "
                             "the prompts, or set data.truncation: drop to leave them out")


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""
