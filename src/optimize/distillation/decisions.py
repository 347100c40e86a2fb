"""A distillation's decisions and verdicts, the same on every worker.

A decision is one assistant message of a source row, addressed `ROW:MESSAGE` (both zero-based): the teacher answers
it from the messages before it and the row's tools, rendered by the one chat core under the teacher's template.
An answer is accepted when it can stand as that row's answer: it has text or calls, it ended at a stop token (not
at max-tokens), its calls can be read with the teacher's parser, name tools the row offers and carry arguments
that are a JSON object (or a JSON string holding one, distilled as the object), and the row it makes — the history
and the answer as one assistant message, its calls left unanswered — passes the registry's row rule and renders
under the teacher's template — and, where the distillation has an acceptance grader, the grader scores the answer's
text against the decision's own assistant message at least the distillation's min-score. Otherwise it is rejected
with one of `REASONS`, its output kept for `rejections`.

A distillation's instructions are the teacher's system prompt: the teacher is asked with them as the history's
system message, in place of the row's own (`asked`); the row an accepted answer makes keeps the row's history.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable

from optimize.chat.normalize import normalize_messages, row_tools
from optimize.chat.rows import RowError, check_chat_row
from optimize.workloads.tool_calls import read

REASONS = {
    "empty": "the answer is empty",
    "max_tokens": "the answer was cut at max-tokens",
    "unreadable_tool_call": "a tool call cannot be read",
    "unknown_tool": "a tool call names a tool the row does not offer",
    "arguments_not_object": "a tool call's arguments are not a JSON object",
    "row_refused": "the row the answer makes breaks the registry's row rule",
    "template_refused": "the teacher's chat template refuses the row",
    "prompt_too_long": "the prompt leaves no room for an answer within max-model-length",
    "below_min_score": "the acceptance grader scored the answer below min-score, or could not score it",
}
SMOKE = re.compile(r"^\d+:\d+$")
SMOKE_DECISIONS = 16  # the smoke's decisions by default: the first 16, all but one accepted


@dataclass(frozen=True)
class Decision:
    line: int  # the row's line in the source (zero-based)
    message: int  # the assistant message's index in the row
    history: list[dict[str, Any]]  # the messages before it, normalized
    tools: list[dict[str, Any]] | None
    expected: dict[str, Any] | None = None  # the row's own assistant message: what an acceptance grader expects
    fields: dict[str, Any] | None = None  # the row's other fields, as a scoring bundle sees them

    @property
    def address(self) -> str:
        return f"{self.line}:{self.message}"


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    reason: str | None = None  # one of REASONS when rejected
    detail: str | None = None  # what exactly (the row rule's words, the unknown tool's name)
    row: dict[str, Any] | None = None  # the accepted row: history + the teacher's answer


def decisions(row: dict[str, Any], line: int) -> list[Decision]:
    """Each assistant message of a (valid) chat row, with what comes before it."""
    messages = normalize_messages(row["messages"])
    tools = row_tools(row)
    fields = {key: value for key, value in row.items() if key not in ("messages", "tools")}
    return [Decision(line, index, messages[:index], tools, message, fields) for index, message in enumerate(messages)
            if message["role"] == "assistant"]


def asked(history: list[dict[str, Any]], instructions: str | None) -> list[dict[str, Any]]:
    """The history the teacher is asked with: the distillation's instructions as its system message, in place of
    the row's own (they are how the teacher is asked, not part of the row); the row's history without them."""
    if instructions is None:
        return history
    rest = history[1:] if history and history[0]["role"] == "system" else history
    return [{"role": "system", "content": instructions}, *rest]


def graded(verdict: Verdict, score: float | None, explanation: str, min_score: float) -> Verdict:
    """An accepted verdict kept when the acceptance grader's score is at least `min_score`; else rejected
    (`below_min_score`) with the score and the grader's words. An unscored answer is rejected too: nothing says
    it is good enough."""
    if not verdict.accepted or (score is not None and score >= min_score):
        return verdict
    if score is None:  # the grader's words say why (`unscored: …`)
        why = explanation if explanation.startswith("unscored") else f"unscored: {explanation or 'no score'}"
        return Verdict(False, "below_min_score", f"{why} (min-score {min_score:g})")
    said = f"; {explanation}" if explanation else ""
    return Verdict(False, "below_min_score", f"score {score:g} below min-score {min_score:g}{said}")


def without_reasoning(tokens: list[int], opens: int, closes: int) -> list[int]:
    """A thinking teacher's answer without its reasoning: every span from an opening marker through its closing one
    (an unclosed one runs to the end) taken out, so the row keeps the answer alone."""
    kept, inside = [], False
    for token in tokens:
        if token == opens:
            inside = True
        elif token == closes and inside:
            inside = False
        elif not inside:
            kept.append(token)
    return kept


def parse_smoke(text: str) -> list[tuple[int, int]]:
    """`--smoke ROW:MSG,...` as (line, message) pairs; a bad entry is refused naming it."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise ValueError("--smoke needs at least one ROW:MESSAGE decision (both zero-based), e.g. 0:1,3:1")
    for item in items:
        if not SMOKE.match(item):
            raise ValueError(f"--smoke entry {item!r} is not ROW:MESSAGE (two zero-based numbers, e.g. 3:1)")
    return [(int(a), int(b)) for a, b in (item.split(":") for item in items)]


def judge(decision: Decision, text: str, stopped: bool, parser: str | None,
          renders: Callable[[dict[str, Any]], None] | None = None) -> Verdict:
    """The verdict on the teacher's answer `text` to `decision`; `stopped`: it ended at a stop token;
    `renders(row)` raises where the teacher's template refuses the row."""
    if not stopped:
        return Verdict(False, "max_tokens")
    reading = read(parser, text)
    if reading.unreadable:
        return Verdict(False, "unreadable_tool_call")
    if not reading.calls and not reading.content.strip():
        return Verdict(False, "empty")
    offered = {(tool.get("function") or {}).get("name") for tool in decision.tools or () if isinstance(tool, dict)}
    calls = []
    for index, (name, arguments) in enumerate(reading.calls):
        if name not in offered:
            return Verdict(False, "unknown_tool", name)
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                return Verdict(False, "arguments_not_object", f"{name}: a string that is not JSON")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            return Verdict(False, "arguments_not_object", f"{name}: {type(arguments).__name__}")
        calls.append({"id": f"call_{decision.line}_{decision.message}_{index}", "type": "function",
                      "function": {"name": name, "arguments": arguments}})
    answer: dict[str, Any] = {"role": "assistant", "content": reading.content.strip()}
    if calls:
        answer["tool_calls"] = calls
    row: dict[str, Any] = {"messages": [*decision.history, answer]}
    if decision.tools:
        row["tools"] = decision.tools
    try:
        check_chat_row(row)
    except RowError as error:
        return Verdict(False, "row_refused", str(error))
    if renders is not None:
        try:
            renders(row)
        except ValueError as error:  # RenderError and the template's own refusals
            return Verdict(False, "template_refused", str(error))
    return Verdict(True, row=row)
