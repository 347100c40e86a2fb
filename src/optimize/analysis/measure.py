"""Measuring rows (or pairs) under a renderer: the figures an analysis keeps per row.

Rows are measured in chunks: each row is rendered once in full with every assistant message located (two
template calls per row), then the chunk's texts are tokenized in one batch call with offsets, which gives
each row's length and the tokens the default policy (the answer) and `assistantTurns: all` (every assistant
message) train. Rows longer than 512 tokens are rendered once more with every removable turn removed, for
their trimmed length. Preference pairs are measured as a dpo run reads them: the longer of the prompt with
each answer. A row with images is measured with each image's tokens as the model's processor writes them
(`chat.vision`); it has no trimmed length of its own (its oldest turns are never removed).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any

from optimize.chat.images import image_paths
from optimize.chat.normalize import normalize_messages, row_tools
from optimize.chat.render import ALL, FINAL, ChatRenderer, RenderError, trained_messages
from optimize.chat.template_checks import TemplateFinding, findings_from_spans
from optimize.chat.turns import trimmed
from optimize.workloads.lengths import TRIM_FROM


@dataclass(slots=True)
class RowMeasure:
    length: int = 0
    trimmed: int = 0
    trained_final: int = 0
    trained_all: int = 0
    findings: list[TemplateFinding] = field(default_factory=list)


@dataclass(slots=True)
class _Piece:
    """One rendered text of a row, with the spans each policy trains."""

    text: str
    final: list[tuple[int, int]]
    every: list[tuple[int, int]]


def _count(starts: list[int], ends: list[int], spans: list[tuple[int, int]]) -> int:
    """Tokens whose start lies in a span (offsets are sorted, so each span is two binary searches)."""
    total = 0
    for a, b in spans:
        low, high = bisect_left(starts, a), bisect_left(starts, b)
        total += sum(1 for k in range(low, high) if ends[k] > starts[k])
    return total


def _expanded(renderer: ChatRenderer, messages: list[dict[str, Any]], text: str,
              spans: dict[int, tuple[int, int]]) -> tuple[str, dict[int, tuple[int, int]]]:
    """The text and spans with the row's images expanded into their tokens (as they are for a row without)."""
    expansion, _ = renderer.expanded(text, messages)
    if expansion is None:
        return text, spans
    return expansion.text, {index: expansion.spans([span])[0] for index, span in spans.items()}


def _chat_pieces(renderer: ChatRenderer, row: dict[str, Any], measure: RowMeasure) -> list[_Piece]:
    messages = normalize_messages(row["messages"])
    text, spans = renderer.locate(messages, row_tools(row))
    measure.findings = findings_from_spans(messages, text, spans)
    text, spans = _expanded(renderer, messages, text, spans)
    final, every = (trained_messages(row["messages"], turns) for turns in (FINAL, ALL))
    return [_Piece(text, [spans[i] for i in final if i in spans], [spans[i] for i in every if i in spans])]


def _pair_pieces(renderer: ChatRenderer, row: dict[str, Any], measure: RowMeasure) -> list[_Piece]:
    prompt = normalize_messages(row["prompt"])
    tools = row_tools(row)
    pieces = []
    for name in ("chosen", "rejected"):
        messages = [*prompt, *normalize_messages([{**row[name], "role": "assistant"}])]
        last = len(messages) - 1
        try:
            text, spans = renderer.locate(messages, tools, [last])
        except RenderError as error:
            measure.findings.append(TemplateFinding(None, f"'{name}': {error}"))
            continue
        for finding in findings_from_spans(messages, text, spans):
            measure.findings.append(TemplateFinding(None, f"'{name}': {finding.reason} after its prompt"))
        text, spans = _expanded(renderer, messages, text, spans)
        pieces.append(_Piece(text, [spans[last]], [spans[last]]))
    return pieces


def measure_rows(renderer: ChatRenderer, rows: list[dict[str, Any]], kind: str) -> list[RowMeasure]:
    """Figures for a chunk of valid rows of one kind (`chat` or `preference`)."""
    pieces_of = _chat_pieces if kind == "chat" else _pair_pieces
    measures, pieces = [], []
    for row in rows:
        measure = RowMeasure()
        try:
            row_pieces = pieces_of(renderer, row, measure)
        except RenderError as error:
            measure.findings = [TemplateFinding(None, str(error))]
            row_pieces = []
        measures.append(measure)
        pieces.append(row_pieces)
    flat = [piece for row_pieces in pieces for piece in row_pieces]
    # The Rust tokenizer directly: one parallel batch call, no conversion of every encoding to Python lists.
    offsets = (encoding.offsets for encoding in renderer.tokenizer.backend_tokenizer.encode_batch(
        [p.text for p in flat], add_special_tokens=False))
    for measure, row_pieces in zip(measures, pieces, strict=True):
        for piece in row_pieces:
            pairs = next(offsets)
            starts, ends = [s for s, _ in pairs], [e for _, e in pairs]
            if len(pairs) >= measure.length:  # a pair counts its longer answer
                measure.length = len(pairs)
                measure.trained_final = _count(starts, ends, piece.final)
                measure.trained_all = _count(starts, ends, piece.every)
        measure.trimmed = measure.length
    if kind == "chat":
        _trim(renderer, rows, measures)
    return measures


def _trim(renderer: ChatRenderer, rows: list[dict[str, Any]], measures: list[RowMeasure]) -> None:
    """Shortest length of each long row with every removable (oldest) turn removed."""
    texts, owners = [], []
    for row, measure in zip(rows, measures, strict=True):
        if measure.length <= TRIM_FROM or image_paths(row):
            continue
        options = list(trimmed(normalize_messages(row["messages"])))
        if not options:
            continue
        try:
            texts.append(renderer.text(options[-1][1], row_tools(row)))
            owners.append(measure)
        except RenderError:
            continue  # the untrimmed length stands; trimming reports the template's refusal when it is used
    if texts:
        encodings = renderer.tokenizer.backend_tokenizer.encode_batch(texts, add_special_tokens=False)
        for measure, encoding in zip(owners, encodings, strict=True):
            measure.trimmed = min(measure.length, len(encoding.ids))
