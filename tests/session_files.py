"""Conversation files written from the published schemas, for the sessions tests: an OASST1 trees slice, OTLP JSON
logs batches as the Collector's file exporter writes them with the GenAI events, an OTLP JSON traces batch with the
earlier GenAI span events (gen_ai.content.prompt / gen_ai.content.completion), and captured calls."""

from __future__ import annotations

import json
from typing import Any


def oasst_message(message_id: str, role: str, text: str, replies: list | None = None, *, lang: str = "en",
                  deleted: bool = False, rank: int | None = None) -> dict[str, Any]:
    """A message of the OASST1 trees export, with the fields the published schema lists."""
    return {"message_id": message_id, "parent_id": None, "user_id": f"user-{message_id}",
            "created_date": "2023-02-05T14:23:50.983374+00:00", "text": text, "role": role, "lang": lang,
            "review_count": 3, "review_result": True, "deleted": deleted, "rank": rank, "synthetic": False,
            "model_name": None, "detoxify": {"toxicity": 0.0003}, "message_tree_id": "tree", "tree_state":
            "ready_for_export", "emojis": {"name": ["+1"], "count": [2]},
            "labels": {"name": ["spam", "quality"], "value": [0.0, 0.75], "count": [3, 3]},
            "replies": replies or []}


def oasst_tree(tree_id: str, prompt: dict[str, Any]) -> dict[str, Any]:
    return {"message_tree_id": tree_id, "tree_state": "ready_for_export", "prompt": prompt}


def oasst_slice() -> list[dict[str, Any]]:
    """Three trees: one branching (two answers, a follow-up under the first, a deleted answer with a reply under
    it), one in German, one with a single answer."""
    first = oasst_tree("t1", oasst_message("p1", "prompter", "What is a monad?", [
        oasst_message("a1", "assistant", "A monad is a monoid in the category of endofunctors.", [
            oasst_message("p2", "prompter", "Simpler, please?", [
                oasst_message("a3", "assistant", "It chains computations that carry context.", rank=0)])],
            rank=0),
        oasst_message("a2", "assistant", "A design pattern for sequencing effects.", rank=1),
        oasst_message("a4", "assistant", "rude answer", [
            oasst_message("p5", "prompter", "why so rude?")], deleted=True, rank=2),
    ]))
    german = oasst_tree("t2", oasst_message("p6", "prompter", "Wie spät ist es?", [
        oasst_message("a6", "assistant", "Das kann ich nicht wissen.", lang="de", rank=0)], lang="de"))
    third = oasst_tree("t3", oasst_message("p7", "prompter", "Name a prime.", [
        oasst_message("a7", "assistant", "7")]))
    return [first, german, third]


def _string(value: str) -> dict[str, Any]:
    return {"stringValue": value}


def kvlist(**fields: Any) -> dict[str, Any]:
    """An OTLP JSON AnyValue map."""
    return {"kvlistValue": {"values": [{"key": key, "value": _any(value)} for key, value in fields.items()]}}


def _any(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return kvlist(**value)
    if isinstance(value, list):
        return {"arrayValue": {"values": [_any(item) for item in value]}}
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    return _string(value)


def gen_ai_record(name: str, body: dict[str, Any] | None, trace: str, span: str, at: int, *,
                  in_attribute: bool = False) -> dict[str, Any]:
    """A log record carrying a GenAI event: its name in `eventName`, or (older SDKs) in the `event.name`
    attribute."""
    record: dict[str, Any] = {"timeUnixNano": str(at), "observedTimeUnixNano": str(at + 5), "severityNumber": 9,
                              "traceId": trace, "spanId": span, "flags": 1,
                              "attributes": [{"key": "gen_ai.system", "value": _string("openai")}]}
    if in_attribute:
        record["attributes"].append({"key": "event.name", "value": _string(name)})
    else:
        record["eventName"] = name
    if body is not None:
        record["body"] = kvlist(**body)
    return record


def otlp_batch(records: list[dict[str, Any]]) -> dict[str, Any]:
    return {"resourceLogs": [{"resource": {"attributes": [{"key": "service.name", "value": _string("support")}]},
                              "scopeLogs": [{"scope": {"name": "opentelemetry.instrumentation.openai_v2",
                                                       "version": "2.1b0"},
                                             "logRecords": records}]}]}


TRACE = "5b8efff798038103d269b633813fc60c"
T0 = 1_700_000_000_000_000_000


def otel_batches() -> list[dict[str, Any]]:
    """Two model calls over two batches: a plain answer, and a call whose history holds a tool call and its
    answer and whose choice calls a tool again. One unrelated log record. Records are out of time order."""
    plain = [
        gen_ai_record("gen_ai.choice", {"index": 0, "finish_reason": "stop",
                                        "message": {"content": "Paris is rainy, 57°F."}}, TRACE, "eee91b2f8a6b1b02",
                      T0 + 300),
        gen_ai_record("gen_ai.system.message", {"content": "You are a weather bot."}, TRACE, "eee91b2f8a6b1b02", T0),
        gen_ai_record("gen_ai.user.message", {"content": "Weather in Paris?"}, TRACE, "eee91b2f8a6b1b02", T0 + 100,
                      in_attribute=True),
    ]
    tools = [
        gen_ai_record("gen_ai.user.message", {"content": "And in Lyon? Check first."}, TRACE, "aaa0000000000001",
                      T0 + 1000),
        gen_ai_record("gen_ai.assistant.message", {"tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"location\": \"Lyon\"}"}}]}, TRACE,
            "aaa0000000000001", T0 + 1100),
        gen_ai_record("gen_ai.tool.message", {"content": "sunny, 70°F", "id": "call_1"}, TRACE, "aaa0000000000001",
                      T0 + 1200),
        gen_ai_record("gen_ai.choice", {"index": 0, "finish_reason": "tool_calls", "message": {},
                                        "tool_calls": [{"id": "call_2", "type": "function", "function": {
                                            "name": "get_forecast", "arguments": "{\"location\": \"Lyon\"}"}}]},
                      TRACE, "aaa0000000000001", T0 + 1300),
        {"timeUnixNano": str(T0 + 1400), "severityText": "INFO", "body": _string("request done")},
    ]
    return [otlp_batch(plain), otlp_batch(tools)]


def gen_ai_span(span: str, prompt: list[dict[str, Any]] | None, completion: list[dict[str, Any]] | None,
                at: int, finish_reasons: list[str] | None = None) -> dict[str, Any]:
    """A model call's span as the Collector's traces exporter writes it, its prompt and completion as span events
    whose attributes hold the messages as JSON text (GenAI semantic conventions v1.27.0)."""
    attributes = [{"key": "gen_ai.system", "value": _string("openai")},
                  {"key": "gen_ai.operation.name", "value": _string("chat")},
                  {"key": "gen_ai.request.model", "value": _string("gpt-4o-mini")}]
    if finish_reasons is not None:
        attributes.append({"key": "gen_ai.response.finish_reasons",
                           "value": {"arrayValue": {"values": [_string(r) for r in finish_reasons]}}})
    events = []
    if prompt is not None:
        events.append({"timeUnixNano": str(at + 10), "name": "gen_ai.content.prompt", "attributes": [
            {"key": "gen_ai.prompt", "value": _string(json.dumps(prompt))}]})
    if completion is not None:
        events.append({"timeUnixNano": str(at + 20), "name": "gen_ai.content.completion", "attributes": [
            {"key": "gen_ai.completion", "value": _string(json.dumps(completion))}]})
    return {"traceId": TRACE, "spanId": span, "name": "chat gpt-4o-mini", "kind": 3,
            "startTimeUnixNano": str(at), "endTimeUnixNano": str(at + 30), "attributes": attributes,
            "events": events, "status": {}}


def otlp_traces(spans: list[dict[str, Any]]) -> dict[str, Any]:
    return {"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": _string("support")}]},
                               "scopeSpans": [{"scope": {"name": "opentelemetry.instrumentation.openai",
                                                         "version": "0.33.0"},
                                               "spans": spans}]}]}


def otel_trace_batches() -> list[dict[str, Any]]:
    """Two model calls as spans — a plain answer, and one whose prompt holds a tool call and its result and whose
    completion calls a tool again — and an HTTP span of no model call."""
    plain = gen_ai_span("fff0000000000001", [{"role": "system", "content": "You are a weather bot."},
                                             {"role": "user", "content": "Weather in Paris?"}],
                        [{"role": "assistant", "content": "Paris is rainy, 57°F."}], T0, ["stop"])
    tools = gen_ai_span("fff0000000000002", [
        {"role": "user", "content": "And in Lyon? Check first."},
        {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": "{\"location\": \"Lyon\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 70°F"}],
        [{"role": "assistant", "finish_reason": "tool_calls", "tool_calls": [{"id": "call_2", "type": "function",
                                                                               "function": {"name": "get_forecast",
                                                                                            "arguments": "{}"}}]}],
        T0 + 1000)
    http = {"traceId": TRACE, "spanId": "fff0000000000003", "name": "GET /weather", "kind": 2,
            "startTimeUnixNano": str(T0 + 2000), "endTimeUnixNano": str(T0 + 2100), "attributes": [], "events": []}
    return [otlp_traces([plain, http]), otlp_traces([tools])]


def canonical_records() -> list[dict[str, Any]]:
    conversation = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]
    return [
        {"id": "c1", "messages": conversation, "provenance": {"complete": True, "model": "m1"}},
        {"id": "c2", "messages": conversation[:1], "provenance": {"complete": False}},
        {"id": "c3", "messages": [{"role": "user", "content": "weather?"},
                                  {"role": "assistant", "tool_calls": [{"id": "x", "type": "function", "function": {
                                      "name": "get_weather", "arguments": {"city": "Oslo"}}}]}],
         "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
         "provenance": {"complete": True}},
    ]


def jsonl(items: list[Any]) -> bytes:
    return "".join((item if isinstance(item, str) else json.dumps(item, ensure_ascii=False)) + "\n"
                   for item in items).encode()
