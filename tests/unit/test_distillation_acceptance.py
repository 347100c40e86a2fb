"""A distillation's instructions and acceptance grader without a server: the history the teacher is asked with
(the instructions in place of the row's system message, the row itself untouched), a decision's own answer and
fields kept for the grader, the verdict a grade makes, the built-in graders a distillation's worker scores with
(the same `scoring.graders.batch_grader` an evaluation's worker uses), and what `get` shows of them."""

from __future__ import annotations

import io
from contextlib import ExitStack

import pytest
from rich.console import Console

from optimize.cli.commands import distillations as cli
from optimize.distillation.decisions import REASONS, Verdict, asked, decisions, graded
from optimize.schemas.distillations import Distillation
from optimize.scoring.graders import batch_grader

ROW = {"messages": [{"role": "system", "content": "You are a pirate."}, {"role": "user", "content": "2+2?"},
                    {"role": "assistant", "content": "4"}], "topic": "sums"}
KEPT = Verdict(True, row={"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]})


def test_the_instructions_stand_in_place_of_the_row_s_system_message_or_before_its_history():
    [decision] = decisions(ROW, 0)
    assert asked(decision.history, None) == decision.history  # no instructions: the row's own
    replaced = asked(decision.history, "Answer with a number.")
    assert replaced == [{"role": "system", "content": "Answer with a number."}, {"role": "user", "content": "2+2?"}]
    assert decision.history[0] == {"role": "system", "content": "You are a pirate."}  # the row keeps its own
    bare = [{"role": "user", "content": "2+2?"}]
    assert asked(bare, "Be brief.") == [{"role": "system", "content": "Be brief."}, *bare]


def test_a_decision_keeps_its_own_answer_and_the_row_s_fields_for_the_grader():
    [decision] = decisions(ROW, 0)
    assert decision.expected == {"role": "assistant", "content": "4"} and decision.fields == {"topic": "sums"}


def test_a_grade_below_min_score_or_none_rejects_the_answer_saying_why():
    assert "below_min_score" in REASONS
    assert graded(KEPT, 1.0, "exact: matches", 1.0) is KEPT
    assert graded(KEPT, 0.5, "", 0.5) is KEPT  # at min-score is enough
    low = graded(KEPT, 0.25, "exact: does not match", 0.5)
    assert (low.accepted, low.reason, low.detail, low.row) == (
        False, "below_min_score", "score 0.25 below min-score 0.5; exact: does not match", None)
    unscored = graded(KEPT, None, "unscored: the evaluator could not be reached", 0)
    assert (unscored.reason, unscored.detail) == (
        "below_min_score", "unscored: the evaluator could not be reached (min-score 0)")
    assert graded(KEPT, None, "", 0).detail == "unscored: no score (min-score 0)"
    rejected = Verdict(False, "max_tokens")
    assert graded(rejected, None, "", 1) is rejected  # a rejected answer stays rejected for its own reason


def item(expected: str) -> dict:
    return {"prompt": "user: question", "expected": expected, "messages": [{"role": "user", "content": "question"}],
            "expectedText": expected, "fields": {}}


@pytest.mark.parametrize("grader, answers, scores", [
    ("exact", ["Paris", "Rome"], [1.0, 0.0]),
    ("contains", ["It is Paris.", "It is Rome."], [1.0, 0.0]),
    ("regex:^It is", ["It is Paris.", "Rome"], [1.0, 0.0]),
    ("numeric:0.5", ["about 4.2", "7"], [1.0, 0.0]),
    ("json-label-match", ['{"city": "Paris"}', '{"city": "Rome"}'], [1.0, 0.0]),
])
def test_a_built_in_grader_scores_a_batch_against_each_decision_s_own_answer(grader, answers, scores):
    expected = {"exact": "Paris", "contains": "Paris", "regex:^It is": "", "numeric:0.5": "4",
                "json-label-match": '{"city": "Paris"}'}[grader]
    with ExitStack() as held:
        grade = batch_grader(grader, lambda sha256: pytest.fail("no blob is read"), held)
        assert [g.score for g in grade([item(expected), item(expected)], answers)] == scores


def test_a_judge_is_no_batch_grader():
    with ExitStack() as held:
        assert batch_grader("model:NS/judge", lambda sha256: pytest.fail("no blob is read"), held) is None


def sample(**settings) -> dict:
    item = {
        "distillationId": "1a2b3c4d5e6f" + "0" * 20, "project": "support", "teacher": "qwen3-8b",
        "baseModel": {"id": "qwen3-8b", "commit": "c0ffee" * 7},
        "source": {"reference": "support/chat:v3", "digest": "sha256:" + "ab" * 32, "rows": 50},
        "target": "support/distilled",
        "settings": {"replicas": 1, "maxTokens": 4096, "maxModelLength": 65536, "temperature": 1.0, "topP": 1.0,
                     "seed": 0, "smoke": None, "thinking": False, **settings},
        "deviceProfile": "cpu", "phase": "QUEUED", "stage": None, "attempt": 0, "devicesHeld": [],
        "progress": {"decisions": 0, "answered": 0, "accepted": 0, "rejected": 0, "rejectedByReason": {}},
        "acceptance": {"rate": None, "accepted": 0, "decided": 0, "floor": 0.2, "belowFloor": False},
        "smoke": None, "registered": None, "failureReason": None, "createdAt": "2026-01-01T00:00:00Z",
        "finishedAt": None, "terminal": False, "settled": False}
    return Distillation.model_validate(item).model_dump(by_alias=True)  # it fits the API's answer


def rendered(data: dict) -> dict[str, str]:
    buffer = io.StringIO()
    cli.render(Console(file=buffer, width=200, color_system=None, highlight=False), data)
    return {line[:14].strip(): line[14:] for line in buffer.getvalue().splitlines()}


def test_get_shows_the_acceptance_grader_and_the_instructions_where_there_are_some():
    shown = rendered(sample(instructions="Answer with one number.\nNo prose.", acceptGrader="exact", minScore=1))
    assert shown["Accepting"] == "scored by exact, kept at 1 or more"
    assert shown["Instructions"] == "Answer with one number.… (33 characters)"
    plain = rendered(sample())
    assert "Accepting" not in plain and "Instructions" not in plain
