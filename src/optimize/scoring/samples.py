"""What a scorer sees of one answer (a `Sample`) and what it gives back (a `Score`).

A sample is built from a dataset row and the model's answer to it: the row's messages before its final assistant
message are the prompt, that final assistant message's text (when the row ends with one) is `expected`, and the
row's other top-level fields (`answer`, `label`, `metadata`, ...) are `fields`. `sample_from_row` is the one place
that split is made, so a reward in a training run and a grader in an evaluation see the same sample of a row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Sample:
    """One answer to score, with what the row says about it."""

    prompt: list[dict[str, Any]]  # the chat messages before the answer
    completion: str  # the model's answer text
    expected: str | None = None  # the row's own final assistant message text, when the row has one
    fields: dict[str, Any] = field(default_factory=dict)  # the row's other top-level fields


@dataclass(frozen=True)
class Score:
    """A sample's score. `value` None: the scorer does not apply to the sample, or could not score it; `error` says
    why when something went wrong (an exception, a limit hit) — recorded here, never raised."""

    value: float | None
    error: str | None = None


def message_text(content: Any) -> str | None:
    """A message's text: its string content, or its text parts joined; None when it holds no text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [part.get("text") for part in content if isinstance(part, dict) and part.get("type") == "text"]
        if parts and all(isinstance(part, str) for part in parts):
            return "".join(parts)
    return None


def sample_from_row(row: Mapping[str, Any], completion: str) -> Sample:
    """The sample of `completion` answering `row` (a chat row: `messages` plus any other top-level fields).

    A row whose messages end with an assistant message holding text has that text as `expected` and the messages
    before it as the prompt; any other row is all prompt, with `expected` None."""
    messages = list(row.get("messages") or [])
    expected = None
    if messages and isinstance(messages[-1], Mapping) and messages[-1].get("role") == "assistant":
        expected = message_text(messages[-1].get("content"))
        if expected is not None:
            messages = messages[:-1]
    fields = {key: value for key, value in row.items() if key != "messages"}
    return Sample(prompt=[dict(m) for m in messages], completion=completion, expected=expected, fields=fields)
