"""The sessions' parsers, on files written from the published schemas: OASST1 trees become one candidate per
assistant reply (deleted subtrees skipped and counted), OTLP JSON logs become one candidate per model call's choice
(grouped by trace and span, in time order), as do OTLP JSON traces' model-call spans (their prompt and completion
events), captured calls one per complete record; a bad line is refused by its
number. The same content gives the same normalized lines, however it is cut into chunks."""

from __future__ import annotations

import json

import pytest

from optimize.sessions.candidates import LineError, Lines, parse
from optimize.sessions.canonical import CanonicalParser
from optimize.sessions.oasst1 import Oasst1Parser
from optimize.sessions.otel import OtelParser
from tests.session_files import (
    T0,
    TRACE,
    canonical_records,
    gen_ai_record,
    gen_ai_span,
    jsonl,
    oasst_message,
    oasst_slice,
    oasst_tree,
    otel_batches,
    otel_trace_batches,
    otlp_batch,
    otlp_traces,
)


def refusal(parser, data: bytes) -> LineError:
    with pytest.raises(LineError) as caught:
        parse(parser, data)
    return caught.value


def test_oasst1_each_assistant_reply_is_a_conversation_from_the_prompt():
    parsed = parse(Oasst1Parser(), jsonl(oasst_slice()))
    assert parsed.records == 3
    assert [c.id for c in parsed.candidates] == ["a1", "a3", "a2", "a6", "a7"]
    by_id = {c.id: c for c in parsed.candidates}
    assert by_id["a3"].messages == [
        {"role": "user", "content": "What is a monad?"},
        {"role": "assistant", "content": "A monad is a monoid in the category of endofunctors."},
        {"role": "user", "content": "Simpler, please?"},
        {"role": "assistant", "content": "It chains computations that carry context."}]
    assert by_id["a2"].messages[0]["role"] == "user" and len(by_id["a2"].messages) == 2
    assert all(m["role"] != "system" for c in parsed.candidates for m in c.messages)
    assert by_id["a6"].meta["lang"] == "de" and by_id["a6"].meta["messageTreeId"] == "t2"
    assert parsed.skipped == {"deleted": 2}  # the deleted answer and the prompt under it


@pytest.mark.parametrize(("tree", "words"), [
    ({"message_tree_id": "t", "tree_state": "ready_for_export"}, "no 'prompt'"),
    (oasst_tree("t", oasst_message("p", "prompter", "hi", [oasst_message("a", "moderator", "x")])),
     "role 'moderator'"),
    (oasst_tree("t", oasst_message("p", "prompter", "hi", [oasst_message("a", "prompter", "x")])),
     "prompter message replying to a prompter"),
    (oasst_tree("t", oasst_message("a", "assistant", "hi")), "is an assistant message"),
    (oasst_tree("t", {**oasst_message("p", "prompter", "hi"), "text": None}), "'text'"),
    ([1, 2], "a list, not a message tree"),
])
def test_oasst1_a_bad_tree_is_refused_by_its_line(tree, words):
    error = refusal(Oasst1Parser(), jsonl([oasst_slice()[2], tree]))
    assert error.line == 2 and words in error.message and error.hint


def test_oasst1_a_line_that_is_not_json_or_a_single_message_is_refused_with_what_to_change():
    error = refusal(Oasst1Parser(), jsonl([oasst_slice()[0], "{\"prompt\": "]))
    assert error.line == 2 and "is not JSON" in error.message
    single = refusal(Oasst1Parser(), jsonl([oasst_message("m", "prompter", "hi")]))
    assert single.line == 1 and "messages export" in single.hint


def test_otel_calls_are_grouped_by_span_in_time_order_with_their_choice():
    parsed = parse(OtelParser(), jsonl(otel_batches()))
    assert parsed.records == 8 and parsed.skipped == {"not_gen_ai_event": 1}
    plain, tools = parsed.candidates
    assert plain.id == f"{TRACE}/eee91b2f8a6b1b02/0"
    assert plain.messages == [{"role": "system", "content": "You are a weather bot."},
                              {"role": "user", "content": "Weather in Paris?"},
                              {"role": "assistant", "content": "Paris is rainy, 57°F."}]
    assert plain.meta == {"traceId": TRACE, "spanId": "eee91b2f8a6b1b02", "index": 0, "finishReason": "stop",
                          "system": "openai"}
    assert [m["role"] for m in tools.messages] == ["user", "assistant", "tool", "assistant"]
    assert tools.messages[1]["tool_calls"][0]["function"] == {"name": "get_weather",
                                                             "arguments": "{\"location\": \"Lyon\"}"}
    assert tools.messages[2] == {"role": "tool", "content": "sunny, 70°F", "tool_call_id": "call_1"}
    assert tools.messages[3]["tool_calls"][0]["id"] == "call_2" and "content" not in tools.messages[3]


def test_otel_a_choice_ended_in_error_is_skipped_and_each_other_choice_is_a_candidate():
    span = "bbb0000000000002"
    records = [gen_ai_record("gen_ai.user.message", {"content": "hi"}, TRACE, span, 1),
               gen_ai_record("gen_ai.choice", {"index": 1, "finish_reason": "stop", "message": {"content": "yo"}},
                             TRACE, span, 3),
               gen_ai_record("gen_ai.choice", {"index": 0, "finish_reason": "stop", "message": {"content": "hey"}},
                             TRACE, span, 2),
               gen_ai_record("gen_ai.choice", {"index": 2, "finish_reason": "error", "message": {"content": "h"}},
                             TRACE, span, 4)]
    parsed = parse(OtelParser(), jsonl([otlp_batch(records)]))
    assert [c.messages[-1]["content"] for c in parsed.candidates] == ["hey", "yo"]
    assert parsed.skipped == {"error_choice": 1}


def test_otel_refusals_name_the_line():
    no_choice = otlp_batch([gen_ai_record("gen_ai.user.message", {"content": "hi"}, TRACE, "ccc", 1)])
    error = refusal(OtelParser(), jsonl([otel_batches()[0], no_choice]))
    assert error.line == 2 and "no gen_ai.choice" in error.message
    metrics = refusal(OtelParser(), jsonl([{"resourceMetrics": []}]))
    assert metrics.line == 1 and "metrics" in metrics.message and "logs" in metrics.hint
    no_content = otlp_batch([gen_ai_record("gen_ai.user.message", None, TRACE, "ddd", 1),
                             gen_ai_record("gen_ai.choice", {"index": 0, "finish_reason": "stop"}, TRACE, "ddd", 2)])
    assert "content capture" in refusal(OtelParser(), jsonl([no_content])).hint
    no_span = otlp_batch([{"eventName": "gen_ai.user.message", "body": {"stringValue": "x"}}])
    assert "traceId" in refusal(OtelParser(), jsonl([no_span])).message
    unanswered = otlp_batch([
        gen_ai_record("gen_ai.user.message", {"content": "x"}, TRACE, "eee", 1),
        gen_ai_record("gen_ai.tool.message", {"content": "r", "id": "nope"}, TRACE, "eee", 2),
        gen_ai_record("gen_ai.choice", {"index": 0, "finish_reason": "stop", "message": {"content": "y"}}, TRACE,
                      "eee", 3)])
    error = refusal(OtelParser(), jsonl([unanswered]))
    assert error.line == 1 and "tool_call_id 'nope'" in error.message


def test_otel_trace_spans_with_prompt_and_completion_events_are_model_calls():
    parsed = parse(OtelParser(), jsonl(otel_trace_batches()))
    assert parsed.records == 3 and parsed.skipped == {"not_gen_ai_span": 1}
    plain, tools = parsed.candidates
    assert plain.id == f"{TRACE}/fff0000000000001/0"
    assert plain.messages == [{"role": "system", "content": "You are a weather bot."},
                              {"role": "user", "content": "Weather in Paris?"},
                              {"role": "assistant", "content": "Paris is rainy, 57°F."}]
    assert plain.meta["finishReason"] == "stop" and plain.meta["system"] == "openai"
    assert [m["role"] for m in tools.messages] == ["user", "assistant", "tool", "assistant"]
    assert tools.messages[2] == {"role": "tool", "content": "sunny, 70°F", "tool_call_id": "call_1"}
    assert tools.messages[3]["tool_calls"][0]["function"]["name"] == "get_forecast"
    assert tools.meta["finishReason"] == "tool_calls"


@pytest.mark.parametrize("prompt, words", [
    ("not json", "the gen_ai.prompt attribute is not JSON text"),
    (json.dumps({"role": "user"}), "the gen_ai.prompt attribute holds an object, not a list of messages"),
    (json.dumps([{"role": "critic", "content": "x"}]), "a gen_ai.prompt message has role 'critic'"),
])
def test_otel_a_span_whose_prompt_cannot_be_read_is_refused_by_its_line(prompt, words):
    span = gen_ai_span("fff0000000000009", [], [{"role": "assistant", "content": "y"}], T0)
    span["events"][0]["attributes"][0]["value"] = {"stringValue": prompt}
    error = refusal(OtelParser(), jsonl([otel_batches()[0], otlp_traces([span])]))
    assert error.line == 2 and words in error.message, error.message


def test_canonical_complete_records_are_candidates_and_incomplete_ones_are_counted():
    parsed = parse(CanonicalParser(), jsonl(canonical_records()))
    assert [c.id for c in parsed.candidates] == ["c1", "c3"]
    assert parsed.records == 3 and parsed.skipped == {"incomplete": 1}
    assert parsed.candidates[0].meta == {"provenance": {"complete": True, "model": "m1"}}
    assert parsed.candidates[1].tools[0]["function"]["name"] == "get_weather"


@pytest.mark.parametrize(("record", "words"), [
    ({"id": "x", "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]},
     "provenance.complete"),
    ({"id": "x", "messages": [{"role": "robot", "content": "a"}], "provenance": {"complete": True}}, "role 'robot'"),
    ({"id": "x", "messages": [{"role": "user", "content": "a"}], "provenance": {"complete": True}},
     "must be an assistant message"),
    ({"id": "c1", "messages": [], "provenance": {"complete": False}}, "line 1 too"),
    ({"messages": [], "provenance": {"complete": True}}, "no 'id'"),
    ({"id": "x", "prompt": "a", "provenance": {"complete": True}}, "'prompt'"),
])
def test_canonical_a_bad_record_is_refused_by_its_line(record, words):
    error = refusal(CanonicalParser(), jsonl([canonical_records()[0], "", record]))
    assert error.line == 3 and words in error.message, error.message


def test_the_same_file_gives_the_same_lines_however_it_is_cut():
    data = jsonl(oasst_slice())
    whole = b"".join(c.normalized("oasst1") for c in parse(Oasst1Parser(), data).candidates)
    lines, parser, found = Lines(), Oasst1Parser(), []
    for start in range(0, len(data), 7):
        for number, text in lines.feed(data[start:start + 7]):
            found.extend(parser.line(number, text))
    for number, text in lines.end():
        found.extend(parser.line(number, text))
    assert b"".join(c.normalized("oasst1") for c in found) == whole
    first = json.loads(whole.splitlines()[0])
    assert set(first) == {"id", "source", "messages", "meta"} and first["source"] == "oasst1"


def test_a_line_that_is_not_utf8_is_refused_by_its_number():
    lines = Lines()
    with pytest.raises(LineError) as caught:
        lines.feed(b"{}\n\xff\xfe\n")
    assert caught.value.line == 2 and "UTF-8" in caught.value.message


def test_text_that_cannot_be_written_is_refused_by_its_line():
    record = '{"id": "s", "messages": [{"role": "user", "content": "a\\ud800"}, {"role": "assistant", ' \
             '"content": "b"}], "provenance": {"complete": true}}'
    error = refusal(CanonicalParser(), jsonl([record]))
    assert error.line == 1 and "surrogate" in error.message
    nul = refusal(CanonicalParser(), jsonl([{"id": "n", "messages": [{"role": "user", "content": "a\u0000"},
                                                                   {"role": "assistant", "content": "b"}],
                                             "provenance": {"complete": True}}]))
    assert "NUL" in nul.message
