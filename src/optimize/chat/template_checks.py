"""Template checks: rows the chat template refuses, or renders without a message's text or one of its calls.

A finding names the message and what went missing, so analysis and runs can refuse the row by its line before
a device is claimed. The answer (the last message) is checked within its own trained span; earlier assistant
messages are checked in the text rendered after their prompt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from optimize.chat.normalize import normalize_messages, row_tools
from optimize.chat.render import ChatRenderer, RenderError


@dataclass(frozen=True, slots=True)
class TemplateFinding:
    message: int | None  # None: the row as a whole
    reason: str

    def __str__(self) -> str:
        return self.reason if self.message is None else f"message {self.message}: {self.reason}"


def check_row_template(renderer: ChatRenderer, row: dict[str, Any]) -> list[TemplateFinding]:
    messages = normalize_messages(row["messages"])
    tools = row_tools(row)
    try:
        text, spans = renderer.locate(messages, tools)
    except RenderError as error:
        return [TemplateFinding(None, str(error))]
    return findings_from_spans(messages, text, spans)


def findings_from_spans(messages: list[dict[str, Any]], text: str,
                        spans: dict[int, tuple[int, int]]) -> list[TemplateFinding]:
    """Findings for a rendered row, given where each assistant message was located."""
    findings: list[TemplateFinding] = []
    last = len(messages) - 1
    for index, (start, end) in spans.items():
        message = messages[index]
        where = text[start:end] if index == last else text[start:]
        subject = "the answer" if index == last else "the message"
        content = message.get("content")
        if isinstance(content, str) and content.strip() and content.strip() not in where:
            findings.append(TemplateFinding(index, f"the chat template renders {subject} without its text"))
        for call in message.get("tool_calls") or ():
            name = call["function"]["name"]
            if name not in where:
                findings.append(TemplateFinding(index,
                                                f"the chat template renders {subject} without its call {name!r}"))
    return findings
