"""OpenAI chat completions over a serving engine: the request checked by the rules a dataset row is checked by,
its prompt rendered through `optimize.chat` with the request's tools (as a supervised run trains it), the answer
generated, tool calls parsed with the model's parser, and the reply shaped as OpenAI's `chat.completion` or as
a stream of `chat.completion.chunk` events.

A request that offers tools is answered whole and then streamed as one piece, since a call can only be parsed
once its text is complete; a request without tools streams text as it is generated.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from optimize.serving.tool_calls import parse

DEFAULT_MAX_TOKENS = 256
MOST_MAX_TOKENS = 32_768  # the server's cap on one answer (an endpoint still cuts it to the model's context)


class RequestError(ValueError):
    """A request the endpoint cannot answer; the message says which field and what to change."""


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    max_tokens: int
    temperature: float
    top_p: float
    stream: bool


def read_request(body: Any) -> ChatRequest:
    from optimize.chat.normalize import normalize_messages
    from optimize.chat.rows import RowError, check_chat_row

    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list of messages")
    messages = [{**m, "role": "system"} if isinstance(m, dict) and m.get("role") == "developer" else m
                for m in messages]
    tools = body.get("tools") or None
    if body.get("tool_choice") == "none":
        tools = None
    try:  # the rules a dataset row is held to, with a stand-in answer after the prompt
        check_chat_row({"messages": [*messages, {"role": "assistant", "content": "-"}],
                        **({"tools": tools} if tools else {})})
        messages = normalize_messages(messages)
    except (RowError, ValueError, KeyError, TypeError) as error:
        raise RequestError(f"messages: {error}") from None
    if body.get("n") not in (None, 1):
        raise RequestError("n must be 1: an endpoint answers one choice a request")
    field = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = body.get(field)
    if max_tokens is None:  # OpenAI's schema allows null for every optional field: it means the default
        max_tokens = DEFAULT_MAX_TOKENS
    if type(max_tokens) is not int or not 1 <= max_tokens <= MOST_MAX_TOKENS:
        raise RequestError(f"{field} must be a positive integer of at most {MOST_MAX_TOKENS:,}")
    temperature = 1.0 if body.get("temperature") is None else body["temperature"]
    top_p = 1.0 if body.get("top_p") is None else body["top_p"]
    for name, value, high in (("temperature", temperature, 2.0), ("top_p", top_p, 1.0)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= high:
            raise RequestError(f"{name} must be a number from 0 to {high:g}")
    if top_p == 0:  # only the likeliest token is left: greedy
        temperature, top_p = 0.0, 1.0
    return ChatRequest(str(body.get("model") or ""), messages, tools, max_tokens, float(temperature),
                       float(top_p), bool(body.get("stream")))


class Completer:
    """Answers requests for one endpoint: its engine, the base model's renderer and the model's tool parser."""

    def __init__(self, engine, renderer, tool_parser: str | None, context_length: int | None) -> None:
        self.engine = engine
        self.renderer = renderer
        self.tool_parser = tool_parser
        self.context_length = context_length

    def prompt(self, request: ChatRequest) -> list[int]:
        from optimize.chat.render import RenderError

        try:
            text = self.renderer.text(request.messages, request.tools, generation_prompt=True)
        except RenderError as error:
            raise RequestError(str(error)) from None
        # the template writes the beginning-of-sequence token once; the tokenizer must not add another
        ids = self.renderer.tokenizer(text, add_special_tokens=False)["input_ids"]
        if self.context_length and len(ids) >= self.context_length:
            raise RequestError(f"the prompt is {len(ids)} tokens, and the model's context is {self.context_length}")
        return ids

    def _limit(self, request: ChatRequest, prompt: list[int]) -> int:
        room = (self.context_length - len(prompt)) if self.context_length else request.max_tokens
        return max(1, min(request.max_tokens, room))

    def complete(self, adapter: str | None, request: ChatRequest) -> dict[str, Any]:
        prompt = self.prompt(request)
        tokens = list(self.engine.stream(adapter, prompt, self._limit(request, prompt), request.temperature,
                                         request.top_p))
        message, finish = self._message(tokens, request)
        return {"id": _completion_id(), "object": "chat.completion", "created": int(time.time()),
                "model": request.model, "choices": [{"index": 0, "message": message, "finish_reason": finish,
                                                     "logprobs": None}],
                "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(tokens),
                          "total_tokens": len(prompt) + len(tokens)}}

    def chunks(self, adapter: str | None, request: ChatRequest) -> Iterator[str]:
        """Server-sent events, each a `chat.completion.chunk`, then `[DONE]`."""
        prompt = self.prompt(request)  # a bad prompt is refused before the stream starts
        return self._chunks(adapter, request, prompt)

    def _chunks(self, adapter: str | None, request: ChatRequest, prompt: list[int]) -> Iterator[str]:
        ident, created = _completion_id(), int(time.time())

        def event(delta: dict[str, Any], finish: str | None = None, usage: dict | None = None) -> str:
            chunk = {"id": ident, "object": "chat.completion.chunk", "created": created, "model": request.model,
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}
            if usage is not None:
                chunk["usage"] = usage
            return f"data: {json.dumps(chunk)}\n\n"

        yield event({"role": "assistant", "content": ""})
        tokens: list[int] = []
        sent = ""
        for token in self.engine.stream(adapter, prompt, self._limit(request, prompt), request.temperature,
                                        request.top_p):
            tokens.append(token)
            if request.tools:
                continue  # calls are parsed from the whole answer
            text = self._text(tokens, skip_special=True)
            if len(text) > len(sent) and not text.endswith("\ufffd"):  # hold back a half-decoded character
                yield event({"content": text[len(sent):]})
                sent = text
        message, finish = self._message(tokens, request)
        if request.tools:
            delta: dict[str, Any] = {}
            if message["content"]:
                delta["content"] = message["content"]
            if message.get("tool_calls"):
                delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
            if delta:
                yield event(delta)
        else:
            text = self._text(tokens, skip_special=True)
            if len(text) > len(sent):  # what was held back
                yield event({"content": text[len(sent):]})
        yield event({}, finish, {"prompt_tokens": len(prompt), "completion_tokens": len(tokens),
                                 "total_tokens": len(prompt) + len(tokens)})
        yield "data: [DONE]\n\n"

    def _text(self, tokens: list[int], skip_special: bool) -> str:
        kept = [t for t in tokens if t not in self.engine.stop_ids]
        return self.renderer.tokenizer.decode(kept, skip_special_tokens=skip_special)

    def _message(self, tokens: list[int], request: ChatRequest) -> tuple[dict[str, Any], str]:
        stopped = bool(tokens) and tokens[-1] in self.engine.stop_ids
        if request.tools and self.tool_parser:
            offered = {(tool.get("function") or {}).get("name") for tool in request.tools if isinstance(tool, dict)}
            text = self._text(tokens, skip_special=False)
            parsed = parse(self.tool_parser, text, offered)
            if parsed.calls:
                return {"role": "assistant", "content": parsed.content, "tool_calls": parsed.calls}, "tool_calls"
            # calls that cannot be read stay as the model wrote them, their markers included
            return {"role": "assistant", "content": text}, "stop" if stopped else "length"
        # the text as generated (as the stream sends it), without the stop token
        return {"role": "assistant", "content": self._text(tokens, skip_special=True)}, \
            "stop" if stopped else "length"


def _completion_id() -> str:
    return f"chatcmpl-{secrets.token_hex(12)}"
