"""How a curation's judge is asked about one candidate, how its reply becomes a verdict, and the row a kept
candidate registers as — the same on the worker and in the tests.

The judge is asked as an evaluation's `model:` grader asks one (`optimize.scoring.graders.judge_messages`): the
conversation before the answer as the input, the answer as the output. Its system message is the curation's
instructions, followed by the built-in judge instructions (`JUDGE_INSTRUCTIONS`), which say how to reply — a JSON
object `{"score": S}` — so the curation's instructions decide what is kept, and every judge is told the one reply
`judge_grade` reads: a judge never told the form answers in prose, and every candidate would be left unscored.

A reply scoring the candidate at the threshold or more keeps it; below, it is rejected `below_threshold` (its score
in the detail); a reply without a score between 0 and 1 leaves it `unscored` (the reply quoted), as does a prompt an
endpoint judge refused (the refusal in the detail); a candidate whose prompt leaves the judge no room to reply is
rejected `prompt_too_long`, unasked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from optimize.scoring.graders import judge_grade, judge_messages
from optimize.scoring.samples import message_text


class Reason(StrEnum):
    BELOW_THRESHOLD = "below_threshold"
    UNSCORED = "unscored"
    PROMPT_TOO_LONG = "prompt_too_long"


REASONS = {
    Reason.BELOW_THRESHOLD: "the judge scored the candidate below the threshold",
    Reason.UNSCORED: "the judge's reply holds no score between 0 and 1",
    Reason.PROMPT_TOO_LONG: "the candidate leaves the judge no room to reply within its context",
}


@dataclass(frozen=True)
class Verdict:
    kept: bool
    score: float | None = None
    reason: Reason | None = None  # when rejected
    detail: str | None = None


def asked(messages: list[dict[str, Any]], instructions: str) -> list[dict[str, str]]:
    """The judge's conversation about a candidate (`messages`, the last one its answer): the curation's
    instructions as the system message's first part, the conversation before the answer as the input — a system
    message of the candidate's own included, since it shapes the answer judged —, the answer as the output."""
    before, answer = messages[:-1], messages[-1]
    question = "\n".join(f"{m.get('role')}: {_text(m)}" for m in before)
    return judge_messages(question, _text(answer), context=instructions)


def _text(message: dict[str, Any]) -> str:
    """A message's text, with the tool calls it makes written after it as JSON (the judge sees what it did)."""
    text = message_text(message.get("content")) or ""
    calls = [json.dumps(call.get("function", call), ensure_ascii=False, sort_keys=True)
             for call in message.get("tool_calls") or [] if isinstance(call, dict)]
    return "\n".join([text, *(f"[tool call] {call}" for call in calls)]) if calls else text


def judged(judge: str, reply: str, threshold: float) -> Verdict:
    """The verdict on a candidate from the judge's reply: kept at `threshold` or more, else rejected."""
    grade = judge_grade(judge, reply)
    if grade.score is None:
        return Verdict(False, None, Reason.UNSCORED, grade.explanation)
    if grade.score >= threshold:
        return Verdict(True, grade.score)
    said = grade.explanation.split(": ", 1)[1] if ": " in grade.explanation else ""
    return Verdict(False, grade.score, Reason.BELOW_THRESHOLD,
                   f"score {grade.score:g} below threshold {threshold:g}" + (f"; {said}" if said else ""))


def too_long(tokens: int, context: int) -> Verdict:
    return Verdict(False, None, Reason.PROMPT_TOO_LONG,
                   f"the judge's prompt is {tokens} tokens; its context holds {context}")


def refused(why: str) -> Verdict:
    """An endpoint judge that refused the candidate's prompt: unscored, the refusal its detail."""
    return Verdict(False, None, Reason.UNSCORED, why)


def kept_row(candidate: dict[str, Any], system_prompt: str | None) -> dict[str, Any]:
    """The chat row a kept candidate registers as: its messages (and tools), with the curation's system prompt
    first where it has one — in place of the candidate's own system message, since a row opens with one at most."""
    messages = list(candidate["messages"])
    if system_prompt is not None:
        rest = messages[1:] if messages and messages[0].get("role") == "system" else messages
        messages = [{"role": "system", "content": system_prompt}, *rest]
    row: dict[str, Any] = {"messages": messages}
    if candidate.get("tools") is not None:
        row["tools"] = candidate["tools"]
    return row
