"""json-label-match: per-field exact match of the JSON in an answer, tolerant of fences and prose; the report."""

from __future__ import annotations

import pytest

from optimize.evaluation.graders import report
from optimize.scoring.graders import Grade, find_json, json_label_match


@pytest.mark.parametrize("text, value", [
    ('{"label": "billing"}', {"label": "billing"}),
    ('Sure! Here it is:\n```json\n{"label": "billing", "urgent": true}\n```\nAnything else?',
     {"label": "billing", "urgent": True}),
    ("The answer is {not json} then [1, 2]", [1, 2]),
    ("no json at all", None),
])
def test_the_first_json_value_is_found_around_prose_and_fences(text, value):
    assert find_json(text) == value


def test_fields_are_matched_one_by_one_nested_by_path():
    expected = '{"label": "billing", "meta": {"urgent": true, "lang": "en"}}'
    grade = json_label_match('```json\n{"label": "billing", "meta": {"urgent": false, "lang": "en"}}\n```', expected)
    assert grade.fields == {"label": True, "meta.urgent": False, "meta.lang": True}
    assert grade.score == pytest.approx(2 / 3) and "meta.urgent" in grade.explanation
    assert json_label_match('{"meta": {"lang": "en", "urgent": true}, "label": "billing"}', expected).score == 1.0


def test_an_answer_without_json_scores_zero_and_text_answers_compare_as_text():
    grade = json_label_match("I think it is billing", '{"label": "billing"}')
    assert grade.score == 0.0 and grade.fields == {"label": False} and "holds no JSON" in grade.explanation
    assert json_label_match(" Paris ", "Paris").score == 1.0
    assert json_label_match("Lyon", "Paris").score == 0.0


def test_the_report_leaves_unscored_examples_out_and_lists_fields_worst_first():
    grades = [Grade(1.0, "", {"a": True, "b": True}), Grade(0.5, "", {"a": True, "b": False}),
              Grade(None, "the evaluator could not be reached")]
    summary = report(grades)
    assert summary["meanScore"] == 0.75 and summary["exactMatchRate"] == 0.5
    assert summary["scored"] == 2 and summary["unscored"] == 1
    assert [f["field"] for f in summary["perFieldAccuracy"]] == ["b", "a"]
    assert summary["perFieldAccuracy"][0] == {"field": "b", "accuracy": 0.5, "examples": 2}
    assert report([Grade(None, "")])["meanScore"] is None


def test_a_judge_reply_is_read_as_a_score_or_leaves_the_example_unscored():
    from optimize.scoring.graders import JUDGE_INSTRUCTIONS, judge_grade, judge_messages

    assert judge_grade("p/judge", 'Sure. {"score": 0.5, "explanation": "half"}').score == 0.5
    assert judge_grade("p/judge", '```json\n{"score": true}\n```').score == 1.0
    for reply in ("looks right", '{"score": 7}', '{"grade": 1}', '[0.5]'):
        grade = judge_grade("p/judge", reply)
        assert grade.score is None and grade.explanation.startswith("the judge p/judge gave no score")
    system, user = judge_messages("user: 2+2?", "4")
    assert system == {"role": "system", "content": JUDGE_INSTRUCTIONS} and '{"score": S' in system["content"]
    assert user["content"] == "Input:\nuser: 2+2?\n\nOutput:\n4"  # never the expected answer
    system, _ = judge_messages("q", "a", context="You triage tickets.")
    assert system["content"] == "You triage tickets.\n\n" + JUDGE_INSTRUCTIONS
    system, _ = judge_messages("q", "a", instructions="Score 1 for JSON.", context="You triage tickets.")
    assert system["content"] == "Score 1 for JSON."


@pytest.mark.parametrize("spec, kept", [
    (None, "json-label-match"),
    (" json-label-match ", "json-label-match"),
    ("http:http://127.0.0.1:8000/score", "http:http://127.0.0.1:8000/score"),
    ("http://127.0.0.1:8000/score", "http:http://127.0.0.1:8000/score"),  # a bare URL is the http grader
    ("https://scores.example.com/score", "http:https://scores.example.com/score"),
    ("model: ns/judge ", "model:ns/judge"),
    ("bundle:ns/b#score", "bundle:ns/b#score"),
])
def test_a_grader_is_kept_in_one_spelling(spec, kept):
    from optimize.scoring.graders import parse_grader

    assert parse_grader(spec) == kept


@pytest.mark.parametrize("spec", ["vibes", "bogus:x", "http:ftp://host/x", "http:http://", "model:", "http://",
                                  "http://[::1"])
def test_an_unknown_grader_is_refused_naming_the_graders_with_an_example_that_works(spec):
    from optimize.core.errors import Invalid
    from optimize.scoring.graders import parse_grader

    with pytest.raises(Invalid) as refused:
        parse_grader(spec)
    assert ("json-label-match, exact, contains, regex:PATTERN, numeric[:TOLERANCE], http:URL, model:REF, "
            "bundle:REF#MODULE") in refused.value.message
    examples = [word for word in refused.value.hint.split() if ":" in word]
    assert spec not in examples and all(parse_grader(example) for example in examples)


def test_an_http_grader_reaches_only_hosts_the_operator_allows(monkeypatch):
    from optimize.core.errors import Refused
    from optimize.evaluation.service import check_grader

    monkeypatch.delenv("OPTIMIZE_OUTBOUND_HOSTS", raising=False)
    with pytest.raises(Refused, match=r"send rows to 127\.0\.0\.1, which this server may not call \(allowed hosts: "
                                      r"none\)") as refused:
        check_grader("http://127.0.0.1:8000/score")
    assert "OPTIMIZE_OUTBOUND_HOSTS=127.0.0.1" in refused.value.hint
    monkeypatch.setenv("OPTIMIZE_OUTBOUND_HOSTS", "scores.example.com, 127.0.0.1:8000")
    assert check_grader("https://scores.example.com/score") == "http:https://scores.example.com/score"
    assert check_grader("http:http://127.0.0.1:8000/score") == "http:http://127.0.0.1:8000/score"
    with pytest.raises(Refused, match="send rows to 127.0.0.1, which"):
        check_grader("http://127.0.0.1:9999/score")  # the port allowed is 8000 only
    with pytest.raises(Refused, match="send rows to 169.254.169.254"):
        check_grader("http://169.254.169.254/latest/meta-data")
    assert check_grader("json-label-match") == "json-label-match"  # no outbound call


def test_a_generated_nul_is_kept_as_a_replacement_character():
    """A byte-level tokenizer can decode a NUL, which the server refuses in stored text: an answer keeps U+FFFD."""
    from optimize.evaluation.generation import answer_text

    assert answer_text("  {\"a\": 1}\x00x \n") == "{\"a\": 1}\ufffdx"
    assert answer_text("fine") == "fine"


def test_a_rollout_text_keeps_a_nul_as_a_replacement_character():
    from optimize.training.methods.rewards import bounded

    assert bounded("a\x00b") == ("a\ufffdb", False)
    text, cut = bounded("x" * 3000)
    assert cut and len(text) == 2000


def test_served_and_evaluated_models_load_in_bf16_on_a_gpu(monkeypatch):
    """fp32 stays the cpu's; on a GPU bf16 (fp16 where it has none); a stated precision is kept."""
    import torch

    from optimize.chat.generation import device_and_dtype

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device_and_dtype() == ("cpu", "fp32", torch.float32)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert device_and_dtype() == ("cuda", "bf16", torch.bfloat16)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert device_and_dtype() == ("cuda", "fp16", torch.float16)
    assert device_and_dtype("fp32") == ("cuda", "fp32", torch.float32)


def test_a_hostile_judge_reply_or_answer_leaves_the_example_unscored_or_scored_zero():
    from optimize.scoring.graders import judge_grade

    for hostile in ("[" * 1_000_000, "[x" * 500_000, '["' + "[" * 1_000_000):
        grade = judge_grade("p/judge", hostile)
        assert grade.score is None and grade.explanation.startswith("the judge p/judge gave no score")
        assert json_label_match(hostile, '{"label": "billing"}').score == 0.0


def test_an_http_evaluators_answer_is_read_up_to_its_bound():
    import httpx

    from optimize.scoring.graders import EVALUATOR_ANSWER_BYTES, http_grade

    answers = {"/ok": (200, b'{"score": 0.5, "explanation": "half"}'), "/down": (503, b"busy"),
               "/huge": (200, b" " * (EVALUATOR_ANSWER_BYTES + 1)), "/text": (200, b"not json")}

    def evaluator(request: httpx.Request) -> httpx.Response:
        status, body = answers[request.url.path]
        return httpx.Response(status, content=body)

    with httpx.Client(transport=httpx.MockTransport(evaluator)) as client:
        def grade(path: str) -> Grade:
            return http_grade(f"http://scores.test{path}", "q", "a", "e", client)

        assert (grade("/ok").score, grade("/ok").explanation) == (0.5, "half")
        assert grade("/huge") == Grade(None, f"the evaluator at http://scores.test/huge answered more than "
                                             f"{EVALUATOR_ANSWER_BYTES:,} bytes")
        assert grade("/down") == Grade(None, "the evaluator at http://scores.test/down answered 503 without a JSON "
                                             "object")
        assert grade("/text").score is None and "could not be reached" in grade("/text").explanation
