"""Measuring one row (or pair) under a renderer: the figures an analysis keeps per row.

Each chat row is rendered once in full; every assistant message is located once; one tokenization with
offsets gives the row's length and the tokens the default policy (the answer) and `assistantTurns: all`
(every assistant message) train. A row longer than 512 tokens is rendered once more with every removable
turn removed, for its trimmed length. Preference pairs are measured as a dpo run reads them: the longer of
the prompt with each answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from optimize.chat.normalize import normalize_messages, row_tools
from optimize.chat.render import ChatRenderer, RenderError
from optimize.chat.template_checks import TemplateFinding, findings_from_spans
from optimize.chat.turns import trimmed

TRIM_FROM = 512


@dataclass(slots=True)
class RowMeasure:
    length: int
    trimmed: int
    trained_final: int
    trained_all: int
    findings: list[TemplateFinding] = field(default_factory=list)


def _count(offsets: list[tuple[int, int]], spans: list[tuple[int, int]]) -> int:
    if not spans:
        return 0
    return sum(1 for s, e in offsets if e > s and any(a <= s < b for a, b in spans))


def _tokenize(renderer: ChatRenderer, text: str) -> list[tuple[int, int]]:
    encoded = renderer.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    return encoded["offset_mapping"]


def _length(renderer: ChatRenderer, messages: list[dict[str, Any]], tools) -> int:
    return len(renderer.tokenizer(renderer.text(messages, tools), add_special_tokens=False)["input_ids"])


def measure_chat_row(renderer: ChatRenderer, row: dict[str, Any]) -> RowMeasure:
    messages = normalize_messages(row["messages"])
    tools = row_tools(row)
    try:
        text = renderer.text(messages, tools)
        spans = {i: renderer.message_span(messages, tools, text, i)
                 for i, m in enumerate(messages) if m["role"] == "assistant"}
    except RenderError as error:
        return RowMeasure(0, 0, 0, 0, [TemplateFinding(None, str(error))])
    offsets = _tokenize(renderer, text)
    length = len(offsets)
    last = len(messages) - 1
    final = _count(offsets, [spans[last]]) if last in spans else 0
    every = _count(offsets, list(spans.values()))
    shortest = length
    if length > TRIM_FROM:
        options = list(trimmed(messages))
        if options:
            try:
                shortest = min(length, _length(renderer, options[-1][1], tools))
            except RenderError:
                pass  # the untrimmed length stands; the template's refusal is reported when trimming is used
    return RowMeasure(length, shortest, final, every, findings_from_spans(messages, text, spans))


def measure_pair(renderer: ChatRenderer, row: dict[str, Any]) -> RowMeasure:
    prompt = normalize_messages(row["prompt"])
    tools = row_tools(row)
    lengths, trained, findings = [], [], []
    for field_name in ("chosen", "rejected"):
        answer = normalize_messages([{**row[field_name], "role": "assistant"}])
        messages = [*prompt, *answer]
        try:
            text = renderer.text(messages, tools)
            span = renderer.message_span(messages, tools, text, len(messages) - 1)
        except RenderError as error:
            findings.append(TemplateFinding(None, f"'{field_name}': {error}"))
            continue
        offsets = _tokenize(renderer, text)
        lengths.append(len(offsets))
        trained.append(_count(offsets, [span]))
        for finding in findings_from_spans(messages, text, {len(messages) - 1: span}):
            findings.append(TemplateFinding(None, f"'{field_name}': {finding.reason} after its prompt"))
    length = max(lengths, default=0)
    return RowMeasure(length, length, max(trained, default=0), max(trained, default=0), findings)
