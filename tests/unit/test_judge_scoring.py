"""The judge helpers in `optimize.scoring.judge`: how a judge's reply is read, what it is asked, and the `judge`
reward term's spec checks and member (asking through a callable, as the training worker's judge model does)."""

from __future__ import annotations

import pytest

from optimize.core.errors import Invalid
from optimize.scoring import Sample, build_member, check_term, member_spec
from optimize.scoring.judge import JUDGE_INSTRUCTIONS, judge_grade, judge_messages, prompt_parts


@pytest.mark.parametrize(("reply", "score"), [
    ('{"score": 0.5}', 0.5),
    ('Sure. {"score": 0.25, "explanation": "partly"}', 0.25),
    ('```json\n{"score": true}\n```', 1.0),
    ('{"score": false}', 0.0),
    ('{"score": 1}', 1.0),
])
def test_a_reply_with_a_score_is_read(reply, score):
    value, explanation = judge_grade("p/judge:v1", reply)
    assert value == score and explanation.startswith("judged by p/judge:v1")


@pytest.mark.parametrize("reply", ["junk", "", '{"score": 2}', '{"score": -0.1}', '{"score": "high"}', "[0.5]",
                                   '{"grade": 1}'])
def test_a_reply_without_a_score_is_unscored_and_quoted(reply):
    value, explanation = judge_grade("p/judge:v1", reply)
    assert value is None
    assert "the judge p/judge:v1 gave no score between 0 and 1" in explanation


def test_the_judge_is_asked_the_input_and_the_output():
    system, user = judge_messages("user: 2+2?", "4")
    assert system == {"role": "system", "content": JUDGE_INSTRUCTIONS}
    assert user["content"] == "Input:\nuser: 2+2?\n\nOutput:\n4"
    question, context = prompt_parts([{"role": "system", "content": "You add."}, {"role": "user", "content": "2+2?"}])
    assert (question, context) == ("user: 2+2?", "You add.")


def test_the_evaluation_graders_still_read_a_judge_the_same_way():
    from optimize.scoring import graders

    assert graders.JUDGE_INSTRUCTIONS == JUDGE_INSTRUCTIONS and graders.judge_messages is judge_messages
    assert graders.judge_grade("j", '{"score": 0.5}').score == 0.5
    assert graders.judge_grade("j", "junk").score is None


@pytest.mark.parametrize(("spec", "words"), [
    ({"kind": "judge"}, "config.reward.terms[1].model: a judge member needs the model"),
    ({"kind": "judge", "model": "  "}, "config.reward.terms[1].model: a judge member needs the model"),
    ({"kind": "judge", "model": "a/b", "pattern": "x"}, "config.reward.terms[1].pattern: not an option of a judge"),
    ({"kind": "regex", "pattern": "x", "model": "a/b"}, "config.reward.terms[1].model: not an option of a regex"),
    ({"kind": "judge", "model": "a/b", "instructions": ""}, "config.reward.terms[1].instructions: expected"),
])
def test_a_judge_term_is_refused_by_field(spec, words):
    with pytest.raises(Invalid) as refused:
        check_term(spec, "config.reward.terms[1]")
    assert words in refused.value.message, refused.value.message


def test_a_judge_member_asks_through_its_callable_and_reads_each_reply():
    asked = []

    def ask(conversations):
        asked.extend(conversations)
        return ['{"score": 0.75}', "no idea", '{"score": true}']

    term = {"kind": "judge", "name": "judge", "weight": 1.0, "model": "p/judge", "instructions": None,
            "judgeReference": "p/judge:v2", "judgeBaseEntryId": "x", "judgeBaseCommit": "c",
            "judgeManifestDigest": None, "judgeModel": {"id": "x"}}
    samples = [Sample(prompt=[{"role": "user", "content": f"q{i}"}], completion=f"a{i}") for i in range(3)]
    with build_member(member_spec(term), judge=ask, judge_label=term["judgeReference"]) as member:
        scores = member.score(samples)
    assert [s.value for s in scores] == [0.75, None, 1.0]
    assert scores[0].error is None and "the judge p/judge:v2 gave no score" in scores[1].error
    assert asked[0][1]["content"] == "Input:\nuser: q0\n\nOutput:\na0"

    def broken(conversations):
        raise RuntimeError("out of memory")

    failed = build_member(member_spec(term), judge=broken).score(samples[:2])
    assert [s.value for s in failed] == [None, None] and "out of memory" in failed[0].error
    with pytest.raises(Invalid, match="was not loaded here"):
        build_member(member_spec(term))
