"""A distillation's decisions and verdicts (`distillation.decisions`): every assistant message of a row is a
decision with the history before it; a teacher's answer is accepted as the row's answer, calls left unanswered and
a JSON-string argument distilled as its object, or rejected with the reason: empty, cut at max-tokens, a call that
cannot be read, a tool the row does not offer, arguments that are no object, the registry's row rule, the
template's refusal."""

from __future__ import annotations

import pytest

from optimize.distillation.decisions import REASONS, decisions, judge, parse_smoke
from optimize.workloads.tool_calls import read

WEATHER = {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}
ROW = {"messages": [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Oslo?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "4 C, rain"},
    {"role": "assistant", "content": "4 degrees and rain."}], "tools": [WEATHER]}


def test_each_assistant_message_is_a_decision_with_the_history_before_it():
    found = decisions(ROW, 7)
    assert [d.address for d in found] == ["7:2", "7:4"]
    assert [m["role"] for m in found[1].history] == ["system", "user", "assistant", "tool"]
    assert found[1].history[2]["tool_calls"][0]["function"]["arguments"] == {"city": "Oslo"}  # normalized
    assert found[0].tools == [WEATHER]


def test_a_text_answer_is_accepted_as_the_row_s_answer():
    verdict = judge(decisions(ROW, 0)[1], "  Rainy, 4 degrees.  ", True, "hermes")
    assert verdict.accepted and verdict.row["messages"][-1] == {"role": "assistant", "content": "Rainy, 4 degrees."}
    assert verdict.row["tools"] == [WEATHER] and len(verdict.row["messages"]) == 5


def test_a_call_is_accepted_unanswered_with_its_text_and_string_arguments_as_the_object():
    text = 'Let me look.<tool_call>{"name": "weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}</tool_call>'
    verdict = judge(decisions(ROW, 3)[0], text, True, "hermes")
    assert verdict.accepted
    answer = verdict.row["messages"][-1]
    assert answer["content"] == "Let me look."
    assert answer["tool_calls"] == [{"id": "call_3_2_0", "type": "function",
                                     "function": {"name": "weather", "arguments": {"city": "Oslo"}}}]


@pytest.mark.parametrize(("text", "stopped", "reason"), [
    ("   ", True, "empty"),
    ("It is", False, "max_tokens"),
    ('<tool_call>{"name": "weather", "arguments": {"city": </tool_call>', True, "unreadable_tool_call"),
    ('<tool_call>{"name": "stocks", "arguments": {}}</tool_call>', True, "unknown_tool"),
    ('<tool_call>{"name": "weather", "arguments": [1, 2]}</tool_call>', True, "arguments_not_object"),
    ('<tool_call>{"name": "weather", "arguments": "not json"}</tool_call>', True, "arguments_not_object"),
])
def test_an_answer_that_cannot_stand_is_rejected_with_its_reason(text, stopped, reason):
    verdict = judge(decisions(ROW, 0)[0], text, stopped, "hermes")
    assert not verdict.accepted and verdict.reason == reason and reason in REASONS


def test_the_template_s_refusal_rejects_the_answer():
    def refuses(row):
        raise ValueError("the template cannot render a system message here")

    verdict = judge(decisions(ROW, 0)[1], "Fine.", True, "hermes", refuses)
    assert verdict.reason == "template_refused" and "system message" in verdict.detail


def test_a_teacher_without_a_parser_answers_text_only():
    text = '<tool_call>{"name": "weather", "arguments": {}}</tool_call>'
    verdict = judge(decisions(ROW, 0)[1], text, True, None)
    assert verdict.accepted and verdict.row["messages"][-1]["content"] == text


def test_read_tells_an_unreadable_call_from_plain_text():
    assert read("hermes", "Plain words.").unreadable is False
    assert read("hermes", "<tool_call>{broken</tool_call>").unreadable is True
    assert read("mistral", '[TOOL_CALLS][{"name": "weather", "arguments": {}}]').calls == [("weather", {})]
    assert read("llama3_json", '{"name": "weather", "parameters": {"city": ').unreadable is True
    assert read("llama3_json", '{"answer": 4}').calls == []


def test_smoke_decisions_are_read_or_refused_naming_the_entry():
    assert parse_smoke("0:1, 3:2") == [(0, 1), (3, 2)]
    with pytest.raises(ValueError, match="'3-2' is not ROW:MESSAGE"):
        parse_smoke("0:1,3-2")
    with pytest.raises(ValueError, match="at least one"):
        parse_smoke(" , ")


def test_a_thinking_teachers_reasoning_is_taken_out_of_its_answer():
    from optimize.distillation.decisions import without_reasoning

    opens, closes = 1, 2
    assert without_reasoning([5, 1, 7, 8, 2, 9, 10], opens, closes) == [5, 9, 10]
    assert without_reasoning([1, 7, 2, 1, 8, 2, 9], opens, closes) == [9]  # every span
    assert without_reasoning([9, 1, 7, 8], opens, closes) == [9]  # an unclosed span runs to the end
    assert without_reasoning([9, 2, 10], opens, closes) == [9, 2, 10]  # a closing marker alone is text
