"""OpenTelemetry GenAI model calls, from the Collector's file exporter (one OTLP JSON batch per line): log events in
a logs batch (`{"resourceLogs": [{"resource": {...}, "scopeLogs": [{"scope": {...}, "logRecords": [...]}]}]}`), or
span events in a traces batch (`{"resourceSpans": [{"resource": {...}, "scopeSpans": [{"scope": {...},
"spans": [...]}]}]}`).

The log events are those of the GenAI semantic conventions (v1.36.0 and before): `gen_ai.system.message`,
`gen_ai.user.message`, `gen_ai.assistant.message`, `gen_ai.tool.message` and `gen_ai.choice`, named by the log
record's `eventName` or its `event.name` attribute, their fields in the record's `body` (an OTLP AnyValue, a
`kvlistValue`): a message's `content` (and `role`), an assistant message's `tool_calls` (`id`, `type`, `function`
with `name` and `arguments`), a tool message's `id` (the call it answers), a choice's `index`, `finish_reason` and
`message` (`content`, `role`) with its `tool_calls` (beside `message`, or inside it as some instrumentations write
them). Records are grouped by (`traceId`, `spanId`) — one model call each — and ordered by `timeUnixNano` (else
`observedTimeUnixNano`, then the file's order).

The span events are the conventions' earlier form (v1.27.0 and before), on the model call's span itself:
`gen_ai.content.prompt`, whose `gen_ai.prompt` attribute holds the prompt's messages as JSON text (`role`,
`content`, an assistant message's `tool_calls`, a tool message's `tool_call_id`), and `gen_ai.content.completion`,
whose `gen_ai.completion` attribute holds the choices' messages as JSON text (each `role`, `content`, `tool_calls`,
and where given `index` and `finish_reason`, else the span's `gen_ai.response.finish_reasons`). A span without such
events is no model call (`skipped["not_gen_ai_span"]`).

Each call's messages followed by one of its choices is a candidate (one per choice); a choice that ended in `error`
is skipped (`skipped["error_choice"]`, its content may be cut short), and so are log records that are no GenAI
event (`skipped["not_gen_ai_event"]`). A call without a choice is refused, naming the line of its first record.
Pure: lines in, candidates out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from optimize.sessions.candidates import Candidate, LineError, Parser, checked, json_line, json_type

MESSAGE_EVENTS = {"gen_ai.system.message": "system", "gen_ai.user.message": "user",
                  "gen_ai.assistant.message": "assistant", "gen_ai.tool.message": "tool"}
CHOICE = "gen_ai.choice"
PROMPT, COMPLETION = "gen_ai.content.prompt", "gen_ai.content.completion"  # span events: the earlier conventions
HOLDS = 'one OTLP JSON batch of logs {"resourceLogs": [...]} or traces {"resourceSpans": [...]}'
BATCH_HINT = ("each line is one batch as the Collector's file exporter writes logs "
              '({"resourceLogs": [{"resource": {...}, "scopeLogs": [{"scope": {...}, "logRecords": [...]}]}]}) or '
              'traces ({"resourceSpans": [{"resource": {...}, "scopeSpans": [{"scope": {...}, "spans": [...]}]}]})')
CAPTURE_HINT = ("the instrumentation recorded no message content: turn its content capture on (for example "
                "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true) and export the calls again")


@dataclass
class Event:
    line: int
    order: int  # its place in the file
    time: int
    name: str
    body: dict[str, Any]
    attributes: dict[str, Any]


class OtelParser(Parser):
    source = "otel"
    records_are = "log records"

    def __init__(self) -> None:
        super().__init__()
        self._calls: dict[tuple[str, str], list[Event]] = {}
        self._order = 0  # each event's place in the file

    def line(self, number: int, text: str) -> list[Candidate]:
        batch = json_line(number, text, HOLDS)
        if isinstance(batch, dict) and isinstance(batch.get("resourceSpans"), list):
            self.records_are = "spans"
            for resource in batch["resourceSpans"]:
                for scope in _list(resource, "scopeSpans", number):
                    for span in _list(scope, "spans", number):
                        self._span(number, span)
            return []
        if not isinstance(batch, dict) or not isinstance(batch.get("resourceLogs"), list):
            if isinstance(batch, dict) and "resourceMetrics" in batch:
                raise LineError(number, "holds metrics ('resourceMetrics'), not logs or traces",
                                hint="export the logs pipeline, where the GenAI events are log records, or the "
                                     "traces pipeline; " + BATCH_HINT)
            raise LineError(number, "is not an OTLP logs or traces batch (no 'resourceLogs' or 'resourceSpans' "
                                    "list)", hint=BATCH_HINT)
        for resource in batch["resourceLogs"]:
            for scope in _list(resource, "scopeLogs", number):
                for record in _list(scope, "logRecords", number):
                    self._record(number, record)
        return []

    def _event(self, number: int, time: int, name: str, body: dict[str, Any], attributes: dict[str, Any],
               call: tuple[str, str]) -> None:
        self._order += 1
        self._calls.setdefault(call, []).append(Event(number, self._order, time, name, body, attributes))

    def _span(self, number: int, span: Any) -> None:
        """A span with `gen_ai.content.prompt` / `gen_ai.content.completion` events: its prompt's messages and its
        choices, as the log events would carry them."""
        if not isinstance(span, dict):
            raise LineError(number, f"a span is {json_type(span)}, not an object", hint=BATCH_HINT)
        self.records += 1
        events = [e for e in _list(span, "events", number) if isinstance(e, dict)
                  and e.get("name") in (PROMPT, COMPLETION)]
        if not events:
            self.skipped["not_gen_ai_span"] += 1
            return
        trace, span_id = span.get("traceId"), span.get("spanId")
        if not (isinstance(trace, str) and trace and isinstance(span_id, str) and span_id):
            raise LineError(number, "a span with GenAI events has no traceId and spanId",
                            hint="export spans with their ids, as the Collector writes them")
        attributes = _attributes(span.get("attributes"), number)
        reasons = attributes.get("gen_ai.response.finish_reasons")
        reasons = reasons if isinstance(reasons, list) else []
        for event in events:
            time = _nanos(event.get("timeUnixNano")) or _nanos(span.get("startTimeUnixNano"))
            held = _attributes(event.get("attributes"), number)
            if event["name"] == PROMPT:
                for message in _json_messages(held, "gen_ai.prompt", number):
                    role = message.get("role")
                    name = f"gen_ai.{role}.message"
                    if name not in MESSAGE_EVENTS:
                        raise LineError(number, f"a gen_ai.prompt message has role {role!r}",
                                        hint="a prompt's messages are system, user, assistant or tool messages")
                    body = {**message, "id": message.get("tool_call_id", message.get("id"))} if role == "tool" \
                        else message
                    self._event(number, time, name, body, attributes, (trace, span_id))
            else:
                for index, item in enumerate(_json_messages(held, "gen_ai.completion", number)):
                    at = item.get("index", index)
                    reason = item.get("finish_reason") or (reasons[index] if index < len(reasons) else None)
                    body = {"index": at, "finish_reason": reason,
                            "message": {key: item[key] for key in ("content", "tool_calls") if key in item}}
                    self._event(number, time + 1, CHOICE, body, attributes, (trace, span_id))

    def _record(self, number: int, record: Any) -> None:
        if not isinstance(record, dict):
            raise LineError(number, f"a log record is {json_type(record)}, not an object", hint=BATCH_HINT)
        self.records += 1
        attributes = _attributes(record.get("attributes"), number)
        name = record.get("eventName") or attributes.get("event.name")
        if name not in MESSAGE_EVENTS and name != CHOICE:
            self.skipped["not_gen_ai_event"] += 1
            return
        trace, span = record.get("traceId"), record.get("spanId")
        if not (isinstance(trace, str) and trace and isinstance(span, str) and span):
            raise LineError(number, f"a {name} record has no traceId and spanId, so its model call cannot be told "
                                    "apart from others", hint="export the events with their span context (they "
                                                              "are emitted inside the model call's span)")
        body = any_value(record.get("body"), number) if record.get("body") is not None else {}
        if not isinstance(body, dict):
            raise LineError(number, f"a {name} record's body is {json_type(body)}, not a map (kvlistValue)",
                            hint="the GenAI events carry their fields in a kvlistValue body")
        time = _nanos(record.get("timeUnixNano")) or _nanos(record.get("observedTimeUnixNano"))
        self._event(number, time, name, body, attributes, (trace, span))

    def end(self) -> list[Candidate]:
        found: list[Candidate] = []
        ordered = sorted(self._calls.items(), key=lambda item: min((e.time, e.order) for e in item[1]))
        for (trace, span), events in ordered:
            events.sort(key=lambda e: (e.time, e.order))
            choices = [e for e in events if e.name == CHOICE]
            if not choices:
                first = min(events, key=lambda e: e.order)
                raise LineError(first.line, f"the model call of trace {trace} span {span} has {len(events)} message "
                                            "event(s) but no gen_ai.choice, so it has no answer",
                                hint="export each call's gen_ai.choice event too, or leave the call out")
            messages = [_message(e) for e in events if e.name != CHOICE]
            for choice in sorted(choices, key=lambda e: (_index(e), e.order)):
                reason = choice.body.get("finish_reason")
                if reason == "error":
                    self.skipped["error_choice"] += 1
                    continue
                answer = _answer(choice)
                meta = {"traceId": trace, "spanId": span, "index": _index(choice), "finishReason": reason}
                system = choice.attributes.get("gen_ai.system")
                if system is not None:
                    meta["system"] = system
                candidate = Candidate(id=f"{trace}/{span}/{_index(choice)}", messages=[*messages, answer],
                                      meta=meta)
                found.append(checked(candidate, choice.line, f"the model call of trace {trace} span {span}"))
        self._calls.clear()
        return found


def any_value(value: Any, number: int) -> Any:
    """An OTLP JSON AnyValue as plain JSON (`intValue` as an integer, a `kvlistValue` as an object, `bytesValue`
    left as its base64 text)."""
    if not isinstance(value, dict):
        raise LineError(number, f"an AnyValue is {json_type(value)}, not an object such as {{\"stringValue\": …}}",
                        hint="write values as OTLP JSON does: stringValue, intValue, kvlistValue, …")
    if not value:
        return None
    kind, inner = next(iter(value.items()))
    if kind in ("stringValue", "boolValue", "doubleValue", "bytesValue"):
        return inner
    if kind == "intValue":
        try:
            return int(inner)
        except (TypeError, ValueError):
            raise LineError(number, f"intValue {inner!r} is not an integer", hint="write an integer") from None
    if kind == "arrayValue":
        return [any_value(item, number) for item in _values(inner, number)]
    if kind == "kvlistValue":
        return {item.get("key"): any_value(item.get("value") or {}, number)
                for item in _values(inner, number) if isinstance(item, dict)}
    raise LineError(number, f"{kind!r} is not an OTLP AnyValue field",
                    hint="an AnyValue holds one of stringValue, boolValue, intValue, doubleValue, arrayValue, "
                         "kvlistValue or bytesValue")


def _json_messages(attributes: dict[str, Any], key: str, number: int) -> list[dict[str, Any]]:
    """A span event's messages, held as JSON text in its attribute `key`."""
    text = attributes.get(key)
    if text is None:
        raise LineError(number, f"a {key.replace('gen_ai.', 'gen_ai.content.')} event has no {key} attribute",
                        hint=CAPTURE_HINT)
    try:
        messages = json.loads(text) if isinstance(text, str) else text
    except ValueError:
        raise LineError(number, f"the {key} attribute is not JSON text", hint=f"{key} holds the messages as a JSON "
                                                                             "list of {role, content}") from None
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise LineError(number, f"the {key} attribute holds {json_type(messages)}, not a list of messages",
                        hint=f"{key} holds the messages as a JSON list of {{role, content}}")
    return messages


def _values(inner: Any, number: int) -> list[Any]:
    values = inner.get("values", []) if isinstance(inner, dict) else None
    if not isinstance(values, list):
        raise LineError(number, "an arrayValue or kvlistValue has no 'values' list", hint=BATCH_HINT)
    return values


def _attributes(items: Any, number: int) -> dict[str, Any]:
    if items is None:
        return {}
    if not isinstance(items, list):
        raise LineError(number, f"attributes are {json_type(items)}, not a list of key/value pairs",
                        hint=BATCH_HINT)
    return {item.get("key"): any_value(item.get("value") or {}, number) for item in items if isinstance(item, dict)}


def _list(holder: Any, key: str, number: int) -> list[Any]:
    found = holder.get(key, []) if isinstance(holder, dict) else None
    if not isinstance(found, list):
        raise LineError(number, f"'{key}' is {json_type(found)}, not a list", hint=BATCH_HINT)
    return found


def _nanos(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _index(choice: Event) -> int:
    index = choice.body.get("index", 0)
    return index if isinstance(index, int) else 0


def _content(event: Event, holder: dict[str, Any]) -> Any:
    content = holder.get("content")
    if isinstance(content, dict):
        raise LineError(event.line, f"a {event.name} record's content is an object; it must be text or a list "
                                    "of text parts", hint="record the message's text as its content")
    return content


def _message(event: Event) -> dict[str, Any]:
    role = MESSAGE_EVENTS[event.name]
    content = _content(event, event.body)
    message: dict[str, Any] = {"role": role}
    if content is not None:
        message["content"] = content
    if role == "assistant" and event.body.get("tool_calls"):
        message["tool_calls"] = _tool_calls(event, event.body["tool_calls"])
    if role == "tool":
        message["tool_call_id"] = event.body.get("id")
    if content is None and "tool_calls" not in message:
        raise LineError(event.line, f"a {event.name} record carries no content", hint=CAPTURE_HINT)
    return message


def _answer(choice: Event) -> dict[str, Any]:
    held = choice.body.get("message")
    held = held if isinstance(held, dict) else {}
    answer: dict[str, Any] = {"role": "assistant"}
    content = _content(choice, held)
    if content is not None:
        answer["content"] = content
    calls = choice.body.get("tool_calls") or held.get("tool_calls")
    if calls:
        answer["tool_calls"] = _tool_calls(choice, calls)
    if content is None and not calls:
        raise LineError(choice.line, "a gen_ai.choice record carries no message content and no tool calls",
                        hint=CAPTURE_HINT)
    return answer


def _tool_calls(event: Event, calls: Any) -> list[dict[str, Any]]:
    if not isinstance(calls, list):
        raise LineError(event.line, f"a {event.name} record's tool_calls are {json_type(calls)}, not a list",
                        hint="tool_calls lists the calls, each with id, type and function")
    converted = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise LineError(event.line, f"a tool call of a {event.name} record has no 'function'",
                            hint="each tool call holds id, type 'function' and function {name, arguments}")
        arguments = function.get("arguments")
        # the conventions recommend the model's JSON string as it came; a chat row takes it as it is, or an object
        converted.append({"id": call.get("id"), "type": call.get("type") or "function",
                          "function": {"name": function.get("name"),
                                       "arguments": arguments if arguments is not None else json.dumps({})}})
    return converted
