"""Turn structure, for trimming the oldest turns of a long conversation (`data.truncation: oldest`).

A turn is a user message and the messages after it up to the next user message; anything before the first
user message is a turn of its own. The system prompt and the final turn are always kept, and because tool
results follow their call inside one turn, a call and its result are removed together.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def turn_bounds(messages: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """[start, end) index ranges of the turns, in order."""
    starts = [0] + [i for i, m in enumerate(messages) if m["role"] == "user" and i > 0]
    return [(start, end) for start, end in zip(starts, starts[1:] + [len(messages)], strict=True)]


def trimmed(messages: list[dict[str, Any]]) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """Yield (turns removed, messages) with 1, 2, … of the oldest removable turns removed."""
    system = [messages[0]] if messages and messages[0]["role"] == "system" else []
    body = messages[len(system):]
    bounds = turn_bounds(body) if body else []
    removable = bounds[:-1]  # the final turn (holding the answer) is always kept
    for count in range(1, len(removable) + 1):
        keep_from = removable[count - 1][1]
        yield count, system + body[keep_from:]
