"""OpenAI's Responses API (`POST /v1/responses`) over an endpoint's chat completer, for text and function tools:
a request's `input` (a string, or message, `function_call` and `function_call_output` items), `instructions`,
`tools`, `tool_choice`, `text.format` and sampling are read into a chat completion request (every chat rule and
refusal applies, named by the Responses field), answered by the same batch, and written back as a `response` —
its `output` a message with `output_text` and/or `function_call` items — whole, or streamed as the Responses
events (`response.created` … `response.output_text.delta` … `response.completed`).

A response is kept for `KEEP_SECONDS` (at most `MOST_KEPT`, the oldest dropped first), so a request naming it as
`previous_response_id` goes on from its conversation (its instructions are not carried over, as OpenAI does). Kept
responses live in the endpoint's process: one an endpoint no longer holds is refused naming the id.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from optimize.core.errors import ParamError
from optimize.serving.completions import ChatRequest, RequestError, read_request

KEEP_SECONDS = 3600.0
MOST_KEPT = 1024
FIELDS = frozenset({"model", "input", "instructions", "tools", "tool_choice", "temperature", "top_p",
                    "max_output_tokens", "stream", "previous_response_id", "text", "metadata", "store", "user",
                    "parallel_tool_calls", "reasoning", "truncation", "include", "service_tier", "prompt_cache_key",
                    "safety_identifier", "top_logprobs", "background", "stream_options"})
# chat completion fields a refusal names -> the Responses field the request wrote them in
RENAMED = {"max_tokens": "max_output_tokens", "response_format": "text.format",
           "response_format.json_schema.schema": "text.format.schema", "messages": "input"}


class NotKept(LookupError):
    """A previous_response_id the endpoint does not hold."""


@dataclass(frozen=True)
class ResponsesRequest:
    chat: ChatRequest
    echo: dict[str, Any]  # what the response repeats of the request
    history: list[dict[str, Any]]  # the conversation before this request's input (from previous_response_id)
    stream: bool

    @property
    def model(self) -> str:
        return self.chat.model


def _refused(error: RequestError) -> RequestError:
    param = RENAMED.get(error.param or "", error.param)
    message = str(error)
    for old, new in RENAMED.items():
        message = message.replace(old, new)
    return RequestError(message, param)


# What `include` may ask for: encrypted reasoning items (Inspect asks for them whenever it does not store
# responses) are none here, since answers hold no reasoning items
INCLUDABLE = frozenset({"reasoning.encrypted_content"})


def _read_include(include: Any) -> None:
    if include is None:
        return
    if not isinstance(include, list) or not all(isinstance(item, str) for item in include):
        raise RequestError("include must be a list of strings", "include")
    other = [item for item in include if item not in INCLUDABLE]
    if other:
        raise RequestError(f"include {other[0]!r} is not supported by this endpoint (it may ask for "
                           f"{', '.join(sorted(INCLUDABLE))}, which answers hold none of)", "include")


def _content(content: Any, where: str) -> Any:
    """A message's Responses content (a string, or input_text / output_text / input_image parts) as chat content."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise RequestError(f"{where}.content must be a string or a list of parts", "input")
    parts = []
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text") and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            parts.append({"type": "image_url", "image_url": {"url": part["image_url"]}})
        else:
            raise RequestError(f"{where}.content[{index}] must be an input_text, output_text or input_image part "
                               "(an image as a data URL)", "input")
    return parts


def _messages(items: Any) -> list[dict[str, Any]]:
    """`input` as chat messages: a string is one user message; items are messages, function calls (joined into the
    assistant message before them) and their outputs (tool messages)."""
    if isinstance(items, str):
        if not items:
            raise RequestError("input must not be empty", "input")
        return [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise RequestError("input must be a string or a non-empty list of items", "input")
    messages: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        where = f"input[{index}]"
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind == "message" and item.get("role") in ("user", "system", "developer", "assistant"):
            role = "system" if item["role"] == "developer" else item["role"]
            messages.append({"role": role, "content": _content(item.get("content"), where)})
        elif kind == "function_call" and all(isinstance(item.get(k), str) for k in ("call_id", "name", "arguments")):
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}}
            if messages and messages[-1]["role"] == "assistant" and messages[-1].get("tool_calls") is not None:
                messages[-1]["tool_calls"].append(call)
            elif messages and messages[-1]["role"] == "assistant":
                messages[-1]["tool_calls"] = [call]
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output" and isinstance(item.get("call_id"), str):
            output = item.get("output")
            messages.append({"role": "tool", "tool_call_id": item["call_id"],
                             "content": output if isinstance(output, str) else json.dumps(output)})
        else:
            raise RequestError(f"{where} must be a message (role user, system, developer or assistant), a "
                               "function_call or a function_call_output", "input")
    return messages


def _tools(tools: Any) -> list[dict[str, Any]] | None:
    if not tools:
        return None
    if not isinstance(tools, list):
        raise RequestError("tools must be a list of function tools", "tools")
    chat = []
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("name"), str):
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise RequestError(f"tools[{index}] is a {kind!r} tool; an endpoint runs function tools only (the "
                               "model calls them, your code runs them)", "tools")
        chat.append({"type": "function", "function": {key: tool[key] for key in ("name", "description", "parameters")
                                                      if key in tool}})
    return chat


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict) and choice.get("type") == "function" and "function" not in choice:
        return {"type": "function", "function": {"name": choice.get("name")}}
    return choice


def _format(text: Any) -> dict[str, Any] | None:
    form = (text or {}).get("format") if isinstance(text, dict) else None
    if form is None:
        return None
    if isinstance(form, dict) and form.get("type") == "json_schema":
        return {"type": "json_schema", "json_schema": {key: form[key] for key in ("name", "schema", "strict")
                                                       if key in form}}
    return form


class Responder:
    """Answers the Responses API for one endpoint through its chat completer, and keeps what it answered."""

    def __init__(self, completer) -> None:
        self.completer = completer
        self._kept: OrderedDict[str, tuple[float, list[dict[str, Any]]]] = OrderedDict()
        self._lock = threading.Lock()

    def read(self, body: Any) -> ResponsesRequest:
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        unknown = sorted(set(body) - FIELDS)
        if unknown:
            raise RequestError(f"unrecognized request argument(s): {', '.join(unknown)}", unknown[0])
        if body.get("background") not in (None, False):
            raise RequestError("background is not supported by this endpoint; leave it out", "background")
        _read_include(body.get("include"))
        history = self._history(body.get("previous_response_id"))
        messages = _messages(body.get("input"))
        instructions = body.get("instructions")
        if instructions is not None and not isinstance(instructions, str):
            raise RequestError("instructions must be a string", "instructions")
        system = [{"role": "system", "content": instructions}] if instructions else []
        chat = {"model": body.get("model"), "messages": [*system, *history, *messages],
                "tools": _tools(body.get("tools")), "tool_choice": _tool_choice(body.get("tool_choice")),
                "temperature": body.get("temperature"), "top_p": body.get("top_p"),
                "max_tokens": body.get("max_output_tokens"), "response_format": _format(body.get("text")),
                "stream": body.get("stream"), "stream_options": {"include_usage": True} if body.get("stream") else None,
                "parallel_tool_calls": body.get("parallel_tool_calls")}
        try:
            request = read_request({key: value for key, value in chat.items() if value is not None})
        except ParamError as error:
            raise _refused(error) from None
        echo = {"instructions": instructions, "tools": body.get("tools") or [],
                "tool_choice": body.get("tool_choice") or "auto", "temperature": body.get("temperature", 1.0),
                "top_p": body.get("top_p", 1.0), "max_output_tokens": body.get("max_output_tokens"),
                "previous_response_id": body.get("previous_response_id"), "metadata": body.get("metadata") or {},
                "text": body.get("text") or {"format": {"type": "text"}},
                "parallel_tool_calls": body.get("parallel_tool_calls", True),
                "store": body.get("store", True)}
        return ResponsesRequest(request, echo, [*history, *messages], bool(body.get("stream")))

    def _history(self, previous: Any) -> list[dict[str, Any]]:
        if previous is None:
            return []
        with self._lock:
            self._forget()
            kept = self._kept.get(previous) if isinstance(previous, str) else None
        if kept is None:
            raise NotKept(f"previous_response_id {previous!r} is not held by this endpoint (responses are kept "
                          f"{KEEP_SECONDS / 3600:g} hour in the endpoint that answered them)")
        return [dict(message) for message in kept[1]]

    def _forget(self) -> None:
        now = time.monotonic()
        while self._kept and (len(self._kept) > MOST_KEPT or next(iter(self._kept.values()))[0] < now - KEEP_SECONDS):
            self._kept.popitem(last=False)

    def _keep(self, response_id: str, conversation: list[dict[str, Any]]) -> None:
        with self._lock:
            self._kept[response_id] = (time.monotonic(), conversation)
            self._forget()

    def complete(self, adapter: str | None, asked: ResponsesRequest) -> dict[str, Any]:
        answer = self.completer.complete(adapter, asked.chat)
        choice = answer["choices"][0]
        return self._response(asked, choice["message"], choice["finish_reason"], answer["usage"])

    def _response(self, asked: ResponsesRequest, message: dict[str, Any], finish: str, used: dict[str, Any],
                  response_id: str | None = None, message_id: str | None = None) -> dict[str, Any]:
        response_id = response_id or f"resp_{secrets.token_hex(12)}"
        response = {"id": response_id, "object": "response", "created_at": int(time.time()), "status": "completed",
                    "error": None, "incomplete_details": None, "model": asked.chat.model,
                    "output": output_items(message, message_id), "usage": responses_usage(used), **asked.echo}
        if finish == "length":
            response["status"], response["incomplete_details"] = "incomplete", {"reason": "max_output_tokens"}
        response["output_text"] = "".join(part["text"] for item in response["output"] if item["type"] == "message"
                                          for part in item["content"])
        if asked.echo.get("store", True):
            self._keep(response_id, [*asked.history, {key: message[key] for key in ("role", "content", "tool_calls")
                                                      if message.get(key) is not None}])
        return response

    def chunks(self, adapter: str | None, asked: ResponsesRequest) -> Iterator[str]:
        """The Responses events of a streamed answer (the chat stream read as it comes)."""
        chat = self.completer.chunks(adapter, asked.chat)  # refused or queued before the stream starts
        return self._events(asked, chat)

    def _events(self, asked: ResponsesRequest, chat: Iterator[str]) -> Iterator[str]:
        response_id = f"resp_{secrets.token_hex(12)}"
        numbers = iter(range(1 << 30))
        started = {"id": response_id, "object": "response", "created_at": int(time.time()), "status": "in_progress",
                   "model": asked.chat.model, "output": [], "usage": None, **asked.echo}

        def event(kind: str, **fields: Any) -> str:
            return f"event: {kind}\ndata: {json.dumps({'type': kind, 'sequence_number': next(numbers), **fields})}\n\n"

        yield event("response.created", response=started)
        yield event("response.in_progress", response=started)
        text, calls, finish, used, message_id = "", {}, "stop", None, f"msg_{secrets.token_hex(12)}"
        for chunk in chat:
            payload = chunk.removeprefix("data: ").strip()
            if payload == "[DONE]":
                break
            data = json.loads(payload)
            if "error" in data:
                yield event("error", message=data["error"].get("message"), code=data["error"].get("code"))
                return
            used = data.get("usage") or used
            for choice in data.get("choices") or []:
                delta, finish = choice.get("delta") or {}, choice.get("finish_reason") or finish
                if delta.get("content"):
                    if not text:
                        yield event("response.output_item.added", output_index=0, item={
                            "type": "message", "id": message_id, "status": "in_progress", "role": "assistant",
                            "content": []})
                        yield event("response.content_part.added", item_id=message_id, output_index=0,
                                    content_index=0, part={"type": "output_text", "text": "", "annotations": []})
                    text += delta["content"]
                    yield event("response.output_text.delta", item_id=message_id, output_index=0, content_index=0,
                                delta=delta["content"])
                for call in delta.get("tool_calls") or []:
                    calls[call["index"]] = call
        message = {"role": "assistant", "content": text or None,
                   "tool_calls": [calls[i] for i in sorted(calls)] or None}
        response = self._response(asked, message, finish, used or {}, response_id, message_id)
        for index, item in enumerate(response["output"]):
            if item["type"] == "message":
                yield event("response.output_text.done", item_id=item["id"], output_index=index, content_index=0,
                            text=text)
                yield event("response.content_part.done", item_id=item["id"], output_index=index, content_index=0,
                            part=item["content"][0])
            else:
                yield event("response.output_item.added", output_index=index, item={**item, "arguments": ""})
                yield event("response.function_call_arguments.delta", item_id=item["id"], output_index=index,
                            delta=item["arguments"])
                yield event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                            arguments=item["arguments"])
            yield event("response.output_item.done", output_index=index, item=item)
        yield event("response.completed" if response["status"] == "completed" else "response.incomplete",
                    response=response)


def output_items(message: dict[str, Any], message_id: str | None = None) -> list[dict[str, Any]]:
    """A chat answer as Responses output: its text as a message, each tool call as a function_call."""
    items = []
    if message.get("content"):
        items.append({"type": "message", "id": message_id or f"msg_{secrets.token_hex(12)}", "status": "completed",
                      "role": "assistant", "content": [{"type": "output_text", "text": message["content"],
                                                        "annotations": []}]})
    for call in message.get("tool_calls") or []:
        items.append({"type": "function_call", "id": f"fc_{secrets.token_hex(12)}", "call_id": call["id"],
                      "name": call["function"]["name"], "arguments": call["function"]["arguments"],
                      "status": "completed"})
    return items


def responses_usage(used: dict[str, Any]) -> dict[str, Any]:
    prompt, generated = used.get("prompt_tokens", 0), used.get("completion_tokens", 0)
    cached = (used.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached}, "output_tokens": generated,
            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": prompt + generated}
