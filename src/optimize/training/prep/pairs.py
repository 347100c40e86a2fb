"""Preference pairs as a dpo run trains them: the prompt rendered through `optimize.chat` (with the pair's tools,
the generation prompt, one beginning-of-sequence token), and each answer as the tokens the template writes after
that prompt.

A pair's length is the longer of the prompt with each answer (as the analysis measures it). Under
`data.truncation: error` a longer pair is refused, naming it; under `drop` it is left out (`dataFit.tooLong`).
An answer the template cannot render after its prompt (its text does not start with the prompt's) is refused,
naming the pair and the answer, under every setting. A prompt's images are expanded into the tokens the model's
processor writes for them (`chat.vision`); the answers are the tokens after the prompt either way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from optimize.chat.normalize import normalize_messages, row_tools
from optimize.chat.render import ChatRenderer, RenderError
from optimize.training.prep.data_fit import DataFit, RowRefused


@dataclass(frozen=True)
class RenderedPair:
    prompt_ids: list[int]
    chosen_ids: list[int]
    rejected_ids: list[int]
    images: tuple[str, ...] = ()  # the image files its prompt's image tokens stand for, in order

    @property
    def length(self) -> int:
        return len(self.prompt_ids) + max(len(self.chosen_ids), len(self.rejected_ids))


@dataclass
class PairFitter:
    renderer: ChatRenderer
    limit: int
    truncation: str
    counts: DataFit = field(default_factory=DataFit)

    def fit(self, row: dict[str, Any], where: str) -> RenderedPair | None:
        """The pair as it trains, or None when it is left out; `where` names it ("ns/name:v1 line 7")."""
        pair = self.render(row, where)
        if pair.length <= self.limit:
            self.counts.rows += 1
            return pair
        if self.truncation == "drop":
            self.counts.too_long += 1
            return None
        raise RowRefused(f"{where}: the pair is {pair.length} tokens (the prompt with its longer answer), longer "
                         f"than maxSeqLength {self.limit}; raise maxSeqLength, shorten the pair, or set "
                         "data.truncation: drop to leave such pairs out")

    def render(self, row: dict[str, Any], where: str) -> RenderedPair:
        prompt = normalize_messages(row["prompt"])
        tools = row_tools(row)
        tokenize = self.renderer.tokenizer
        try:
            prompt_text = self.renderer.text(prompt, tools, generation_prompt=True)
        except RenderError as error:
            raise RowRefused(f"{where}: {error}") from None
        prompt_ids = tokenize(prompt_text, add_special_tokens=False)["input_ids"]
        answers = []
        for name in ("chosen", "rejected"):
            messages = [*prompt, *normalize_messages([{**row[name], "role": "assistant"}])]
            try:
                text = self.renderer.text(messages, tools)
            except RenderError as error:
                raise RowRefused(f"{where}: '{name}': {error}") from None
            ids = tokenize(text, add_special_tokens=False)["input_ids"]
            if not text.startswith(prompt_text) or ids[:len(prompt_ids)] != prompt_ids:
                raise RowRefused(f"{where}: the chat template cannot render '{name}' after its prompt (the text it "
                                 "writes for the whole pair does not begin with the prompt's); change the answer or "
                                 "leave the pair out")
            answers.append(ids[len(prompt_ids):])
        try:
            expansion, files = self.renderer.expanded(prompt_text, prompt)
        except RenderError as error:
            raise RowRefused(f"{where}: {error}") from None
        if expansion is not None:
            prompt_ids = tokenize(expansion.text, add_special_tokens=False)["input_ids"]
        return RenderedPair(prompt_ids, answers[0], answers[1], files)
