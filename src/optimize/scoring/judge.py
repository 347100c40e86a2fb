"""A judge: a model asked to grade an answer, and how its reply is read. Shared by the evaluation grader
`model:REF` and the reward term `kind: judge` of a GRPO/GSPO run.

The judge sees the conversation's input (its system message as context) and the answer, never the expected
answer, and replies with a JSON object `{"score": S, "explanation": ...}`, S from 0 to 1 (a boolean counts as 0 or
1). A reply without such a score leaves the answer unscored (None), quoting the reply.

`JudgeMember` is the reward term: it turns each sample into the judge's messages and hands them, a batch at a
time, to `ask` — a callable the caller builds (it loads the judge model; this package loads none) that answers
each conversation with the judge's reply text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from optimize.scoring.members import find_json
from optimize.scoring.samples import Sample, Score, message_text

JUDGE_KIND = "judge"
JUDGE_INSTRUCTIONS = ("Grade the answer to the conversation below. Reply with only a JSON object "
                      '{"score": S, "explanation": "one sentence"}, where S is a number from 0 (wrong or unhelpful) '
                      "to 1 (right and complete).")
JUDGE_MAX_NEW_TOKENS = 64  # the reply's token budget: a JSON score and one sentence
# what admission adds to a judge term (the judge resolved and frozen); not options a plan states
RESOLVED_KEYS = ("judgeReference", "judgeBaseEntryId", "judgeBaseCommit", "judgeManifestDigest")
# what a run's worker adds to it: the judge's base model (the spec's model block) and its adapter's local folder
LOCAL_KEYS = ("judgeModel", "judgeAdapterPath")

Ask = Callable[[list[list[dict[str, str]]]], list[str]]  # the judge's conversations -> its reply texts


def judge_messages(question: str, answer: str, instructions: str | None = None,
                   context: str | None = None) -> list[dict[str, str]]:
    """What the judge is asked for one example: the input and the output, never the expected answer. The judge's
    instructions are the caller's own (or a trained judge's), else the scored row's system message followed
    by the built-in grading instructions, else the built-ins."""
    if instructions is None:
        instructions = f"{context}\n\n{JUDGE_INSTRUCTIONS}" if context else JUDGE_INSTRUCTIONS
    return [{"role": "system", "content": instructions},
            {"role": "user", "content": f"Input:\n{question}\n\nOutput:\n{answer}"}]


def judge_grade(judge: str, reply: str) -> tuple[float | None, str]:
    """The judge's reply read as (score, explanation): `{"score": S}` with S from 0 to 1 (or a boolean), else
    (None, why, quoting the reply)."""
    found = find_json(reply)
    score = found.get("score") if isinstance(found, dict) else None
    if isinstance(score, bool):
        score = float(score)
    if not isinstance(score, (int, float)) or not 0 <= score <= 1:
        return None, f"the judge {judge} gave no score between 0 and 1: {reply.strip()[:120]!r}"
    explanation = found.get("explanation")
    return float(score), f"judged by {judge}" + (f": {explanation}" if explanation else "")


def prompt_parts(messages: list[Mapping[str, Any]]) -> tuple[str, str | None]:
    """(question, context) of a prompt's messages, as the judge reads them: every message but the system one as
    `role: text` lines, and the system message's text (None without one)."""
    question = "\n".join(f"{m.get('role')}: {message_text(m.get('content')) or ''}" for m in messages
                         if isinstance(m, Mapping) and m.get("role") != "system")
    head = messages[0] if messages and isinstance(messages[0], Mapping) else {}
    system = message_text(head.get("content")) if head.get("role") == "system" else None
    return question, system


class JudgeMember:
    """A `judge` member: each sample's prompt and completion are put to the judge (`ask`), its reply read by
    `judge_grade`; an unreadable reply, or a judge that fails, leaves the sample unscored with the reason."""

    kind = JUDGE_KIND

    def __init__(self, spec: Mapping[str, Any], ask: Ask, label: str | None = None,
                 release: Callable[[], None] | None = None) -> None:
        self.spec = dict(spec)
        self.ask = ask
        self.label = label or spec.get("judgeReference") or spec.get("model") or "judge"
        self.instructions = spec.get("instructions")
        self._release = release

    def messages(self, sample: Sample) -> list[dict[str, str]]:
        question, context = prompt_parts(sample.prompt)
        return judge_messages(question, sample.completion, self.instructions, context)

    def check(self) -> None:
        """Nothing to check here: the judge model is loaded by the caller's `ask`."""

    def score(self, samples: list[Sample]) -> list[Score]:
        if not samples:
            return []
        try:
            replies = list(self.ask([self.messages(sample) for sample in samples]))
            if len(replies) != len(samples):
                raise RuntimeError(f"the judge answered {len(replies)} of {len(samples)} conversations")
        except Exception as error:  # noqa: BLE001 - recorded on every sample, never raised
            why = f"the judge {self.label} failed: {type(error).__name__}: {error}"[:500]
            return [Score(None, why) for _ in samples]
        scores = []
        for reply in replies:
            value, explanation = judge_grade(self.label, reply)
            scores.append(Score(value, None if value is not None else explanation[:500]))
        return scores

    def close(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()

    def __enter__(self) -> JudgeMember:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
