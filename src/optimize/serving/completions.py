"""OpenAI chat completions over a serving engine: the request checked by the rules a dataset row is checked by,
its prompt rendered through `optimize.chat` with the request's tools (as a supervised run trains it), the answer
generated, tool calls parsed with the model's parser, and the reply shaped as OpenAI's `chat.completion` or as
a stream of `chat.completion.chunk` events.

A request that offers tools is answered whole and then streamed as one piece, since a call can only be parsed
once its text is complete; a request without tools streams text as it is generated. Several choices (`n`) decode
together from one prefill, whole or streamed (each chunk one choice, by its index).

Every parameter a request may carry is honoured or refused naming it, never ignored: `stop` cuts the answer at
the first stop string (finish_reason stop), `seed` makes sampling reproducible, `logprobs` and `top_logprobs`
return each token's log-probability, `response_format` and a forcing `tool_choice` hold the answer to a grammar
(`serving.structured`), the penalties, a logit bias, `top_k` and `min_p` shape sampling (`serving.sampling`);
any field OpenAI's API does not define is refused.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from optimize.chat.grammars import Constraint
from optimize.core.environment import setting
from optimize.core.errors import ParamError
from optimize.serving.batcher import RequestTimedOut
from optimize.serving.sampling import Shaping, check_vocabulary, read_shaping
from optimize.serving.structured import forced_call, forced_tools, read_response_format
from optimize.workloads.tool_calls import parse

DEFAULT_MAX_TOKENS = 256
# the deployment's cap on one answer (an endpoint still cuts it to the model's context)
MOST_MAX_TOKENS: int = setting("OPTIMIZE_ENDPOINT_MAX_TOKENS")


CHAT_FIELDS = frozenset({
    "model", "messages", "tools", "tool_choice", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n",
    "stream", "stream_options", "stop", "seed", "logprobs", "top_logprobs", "response_format", "frequency_penalty",
    "presence_penalty", "logit_bias", "parallel_tool_calls", "user", "metadata", "store",
    "top_k", "min_p", "repetition_penalty",  # vLLM's sampling extras
    # OpenAI's fields that change nothing an endpoint does: accepted and left, as OpenAI documents them
    "service_tier", "prompt_cache_key", "safety_identifier", "reasoning_effort", "modalities",
    "trained_instructions"})  # false: a trained model's instructions are not put before a request without a system one
MOST_STOPS = 4
MOST_TOP_LOGPROBS = 20
MOST_CHOICES = 16  # n: choices one request may ask for


class RequestError(ParamError):
    """A request the endpoint cannot answer; the message says which field and what to change (`param`). The
    request's grammar (ConstraintError) and sampling (ShapingError) are refused as the same kind of error."""


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    max_tokens: int
    temperature: float
    top_p: float
    stream: bool
    stop: tuple[str, ...] = ()
    seed: int | None = None
    top_logprobs: int | None = None  # None: no log-probabilities; 0: each token's own only
    include_usage: bool = False  # a stream's last chunk before [DONE] carries the usage (stream_options)
    shaping: Shaping = field(default_factory=Shaping)  # biases, penalties, top_k, min_p
    n: int = 1  # choices
    response: Constraint | None = None  # response_format json_object / json_schema
    forced: dict[str, dict[str, Any]] | None = None  # the tools a tool_choice forces a call of, by name
    trained_instructions: bool = True  # a trained model's instructions answer a request without a system message
    parallel_tool_calls: bool = True  # false: an answer keeps its first tool call only


def read_request(body: Any) -> ChatRequest:
    from optimize.chat.normalize import normalize_messages
    from optimize.chat.rows import RowError, check_chat_row
    from optimize.serving.request_images import with_image_files

    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list of messages")
    unknown = sorted(set(body) - CHAT_FIELDS)
    if unknown:
        raise RequestError(f"unrecognized request argument(s): {', '.join(unknown)}", unknown[0])
    messages = [{**m, "role": "system"} if isinstance(m, dict) and m.get("role") == "developer" else m
                for m in messages]
    tools = body.get("tools") or None
    choice = body.get("tool_choice")
    if choice == "none":
        tools = None
    _refuse_unsupported(body)
    response = read_response_format(body.get("response_format"))
    forced = forced_tools(choice, tools)
    if forced is not None and response is not None:
        raise RequestError("response_format and a tool_choice that forces a call cannot both shape one answer; "
                           "leave one out", "tool_choice")
    try:  # images sent as data URLs, read into files; then the rules a dataset row is held to, with a stand-in
        # answer after the prompt
        messages = with_image_files(messages)
        check_chat_row({"messages": [*messages, {"role": "assistant", "content": "-"}],
                        **({"tools": tools} if tools else {})})
        messages = normalize_messages(messages)
    except (RowError, ValueError, KeyError, TypeError) as error:
        raise RequestError(f"messages: {error}") from None
    choices = 1 if body.get("n") is None else body["n"]
    if type(choices) is not int or not 1 <= choices <= MOST_CHOICES:
        raise RequestError(f"n must be a whole number from 1 to {MOST_CHOICES}", "n")
    shaping = read_shaping(body)
    field = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = body.get(field)
    if max_tokens is None:  # OpenAI's schema allows null for every optional field: it means the default
        max_tokens = DEFAULT_MAX_TOKENS
    if type(max_tokens) is not int or not 1 <= max_tokens <= MOST_MAX_TOKENS:
        raise RequestError(f"{field} must be a positive integer of at most {MOST_MAX_TOKENS:,} (this deployment's "
                           "cap on one answer, OPTIMIZE_ENDPOINT_MAX_TOKENS)", field)
    temperature = 1.0 if body.get("temperature") is None else body["temperature"]
    top_p = 1.0 if body.get("top_p") is None else body["top_p"]
    for name, value, high in (("temperature", temperature, 2.0), ("top_p", top_p, 1.0)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= high:
            raise RequestError(f"{name} must be a number from 0 to {high:g}")
    if top_p == 0:  # only the likeliest token is left: greedy
        temperature, top_p = 0.0, 1.0
    return ChatRequest(str(body.get("model") or ""), messages, tools, max_tokens, float(temperature),
                       float(top_p), bool(body.get("stream")), read_stop(body.get("stop")), read_seed(body.get("seed")),
                       _top_logprobs(body), bool((body.get("stream_options") or {}).get("include_usage")), shaping,
                       choices, response, forced, _flag(body, "trained_instructions"),
                       _flag(body, "parallel_tool_calls"))


def _refuse_unsupported(body: dict[str, Any]) -> None:
    """What this engine cannot do, refused naming the field (never silently ignored)."""
    if body.get("store") not in (None, False):
        raise RequestError("store: true is not supported: an endpoint keeps no completions", "store")
    if body.get("modalities") not in (None, ["text"]):
        raise RequestError("modalities may be [\"text\"] only: an endpoint answers in text", "modalities")
    options = body.get("stream_options")
    if options is not None and (not isinstance(options, dict) or set(options) - {"include_usage"}):
        raise RequestError("stream_options may hold include_usage only", "stream_options")


def _flag(body: dict[str, Any], name: str, default: bool = True) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if type(value) is not bool:
        raise RequestError(f"{name} must be true or false", name)
    return value


def read_stop(stop: Any) -> tuple[str, ...]:
    """`stop`: a string or a list of at most four; each non-empty. An empty list (what some harnesses send when
    they have none) is none."""
    if stop is None or stop == []:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if (not isinstance(stops, list) or not 1 <= len(stops) <= MOST_STOPS
            or not all(isinstance(item, str) and item for item in stops)):
        raise RequestError(f"stop must be a non-empty string or a list of at most {MOST_STOPS} of them", "stop")
    return tuple(stops)


def read_seed(seed: Any) -> int | None:
    if seed is None:
        return None
    if type(seed) is not int or not -(2**63) <= seed < 2**63:
        raise RequestError("seed must be an integer", "seed")
    return seed % 2**63


def _top_logprobs(body: dict[str, Any]) -> int | None:
    wanted, top = body.get("logprobs"), body.get("top_logprobs")
    if wanted not in (None, True, False):
        raise RequestError("logprobs must be true or false", "logprobs")
    if top is not None:
        if type(top) is not int or not 0 <= top <= MOST_TOP_LOGPROBS:
            raise RequestError(f"top_logprobs must be an integer from 0 to {MOST_TOP_LOGPROBS}", "top_logprobs")
        if not wanted:
            raise RequestError("top_logprobs needs logprobs: true", "top_logprobs")
    return (top or 0) if wanted else None


@dataclass(frozen=True)
class Prompt:
    """A prompt's token ids, with the image files its image tokens stand for (none for a text prompt) and the
    grammar its answer keeps to (none for a free answer)."""

    ids: list[int]
    images: tuple[str, ...] = ()
    constraint: Constraint | None = None


class Completer:
    """Answers requests for one endpoint: its engine, the base model's renderer and the model's tool parser; a
    served adapter's trained instructions (`instructions`, by served name: kept current as adapters attach) are the
    system message of a request that brings none, unless it says trained_instructions: false."""

    def __init__(self, engine, renderer, tool_parser: str | None, context_length: int | None,
                 instructions: dict[str, str | None] | None = None) -> None:
        self.engine = engine
        self.renderer = renderer
        self.tool_parser = tool_parser
        self.context_length = context_length
        self.instructions = instructions if instructions is not None else {}

    def messages(self, adapter: str | None, request: ChatRequest) -> list[dict[str, Any]]:
        """The conversation the model answers: the request's, after its model's trained instructions where the
        request brings no system message (and has not turned them off)."""
        instructions = self.instructions.get(adapter) if adapter is not None else None
        if not instructions or not request.trained_instructions or \
                any(m.get("role") == "system" for m in request.messages):
            return request.messages
        return [{"role": "system", "content": instructions}, *request.messages]

    def prompt(self, request: ChatRequest, adapter: str | None = None) -> Prompt:
        """The request's prompt as token ids (its images' tokens expanded as the model's processor writes them),
        with the image files they stand for."""
        from optimize.chat.render import RenderError

        messages = self.messages(adapter, request)
        try:
            text = self.renderer.text(messages, request.tools, generation_prompt=True)
            expansion, images = self.renderer.expanded(text, messages)
        except RenderError as error:
            raise RequestError(str(error)) from None
        check_vocabulary(request.shaping, len(self.renderer.tokenizer))
        # a forced call is written in this model's own tool-call format
        constraint = request.response or forced_call(request.forced, self.tool_parser)
        if constraint is not None and not getattr(self.engine, "constrains", False):
            raise RequestError("this endpoint's engine has no constrained decoding; leave response_format and a "
                               "forced tool_choice out",
                               "response_format" if request.response else "tool_choice")
        if images and not getattr(self.engine, "reads_images", False):
            raise RequestError("the request holds images, and this endpoint's engine reads none (images are read by "
                               "the Transformers engine of a model that takes them)")
        # the template writes the beginning-of-sequence token once; the tokenizer must not add another
        ids = self.renderer.tokenizer(expansion.text if expansion else text, add_special_tokens=False)["input_ids"]
        if self.context_length and len(ids) >= self.context_length:
            raise RequestError(f"the prompt is {len(ids)} tokens, and the model's context is {self.context_length}")
        return Prompt(ids, images, constraint)

    def _limit(self, request: ChatRequest, prompt: list[int]) -> int:
        room = (self.context_length - len(prompt)) if self.context_length else request.max_tokens
        return max(1, min(request.max_tokens, room))

    def _steps(self, adapter: str | None, request: ChatRequest, prompt: Prompt, choice: int = 0):
        """The steps of one choice; a seeded request's choices are seeded one after another."""
        extra = {"images": prompt.images} if prompt.images else {}  # an engine without images is never asked
        if request.shaping.shapes:  # an engine that cannot shape is never asked to
            extra["shaping"] = request.shaping
        if prompt.constraint is not None:
            extra["constraint"] = prompt.constraint
        seed = None if request.seed is None else (request.seed + choice) % 2**63
        return self.engine.stream(adapter, prompt.ids, self._limit(request, prompt.ids), request.temperature,
                                  request.top_p, seed, request.top_logprobs, **extra)

    def complete(self, adapter: str | None, request: ChatRequest) -> dict[str, Any]:
        """Every choice (`n`), each asked before any is read, so they decode together and a prompt asked several
        times is prefilled once."""
        prompt = self.prompt(request, adapter)
        streams: list[Any] = []
        try:
            for choice in range(request.n):
                streams.append(self._steps(adapter, request, prompt, choice))
            choices = [self._choice(index, stream, request) for index, stream in enumerate(streams)]
        finally:
            for stream in streams:
                stream.close()
        generated = sum(choice.pop("_generated") for choice in choices)
        return {"id": _completion_id(), "object": "chat.completion", "created": int(time.time()),
                "model": request.model, "choices": choices,
                "usage": usage(prompt.ids, generated, streams[0].sequence.cached)}

    def _choice(self, index: int, generated, request: ChatRequest) -> dict[str, Any]:
        steps: list[Any] = []
        cut = None
        for batch in generated.batches():
            if (cut := take(batch, steps, self._stops(request))) is not None:
                break  # the rest is not generated: closing the stream frees the row
        generated.close()
        tokens = [step.token for step in steps]
        message, finish = self._message(tokens, request, cut)
        return {"index": index, "message": message, "finish_reason": finish,
                "logprobs": self._logprobs(steps, request), "_generated": len(tokens)}

    def chunks(self, adapter: str | None, request: ChatRequest) -> Iterator[str]:
        """Server-sent events, each a `chat.completion.chunk`, then `[DONE]`. The prompt is checked and the request
        given its place in the batch before the stream starts (a refusal or a full endpoint is an error answer);
        several choices (`n`) decode together, their chunks interleaved as their tokens come, each by its index."""
        prompt = self.prompt(request, adapter)
        streams: list[Any] = []
        try:
            for choice in range(request.n):
                streams.append(self._steps(adapter, request, prompt, choice))
        except BaseException:
            for stream in streams:
                stream.close()
            raise
        return self._chunks(request, prompt, streams)

    def _chunks(self, request: ChatRequest, prompt: Prompt, streams: list[Any]) -> Iterator[str]:
        ident, created = _completion_id(), int(time.time())

        def event(index: int, delta: dict[str, Any], finish: str | None = None, logprobs: dict | None = None) -> str:
            chunk = {"id": ident, "object": "chat.completion.chunk", "created": created, "model": request.model,
                     "choices": [{"index": index, "delta": delta, "finish_reason": finish, "logprobs": logprobs}]}
            return f"data: {json.dumps(chunk)}\n\n"

        choices = [_StreamedChoice(self, request, index, generated, event) for index, generated in enumerate(streams)]
        for choice in choices:
            yield event(choice.index, {"role": "assistant", "content": ""})
        live = [(choice, iter(choice.generated.batches())) for choice in choices]
        try:
            while live:  # one batch of each choice in turn: they decode in the same steps, so none waits long
                for item in list(live):
                    choice, batches = item
                    batch = next(batches, None)
                    if batch is not None and not choice.take(batch):
                        yield from choice.deltas()
                        continue
                    live.remove(item)
                    choice.generated.close()  # a stop string: the row is freed
                    yield from choice.ending()
        except RequestTimedOut as late:  # what was generated was sent; the stream ends with OpenAI's error object
            yield timed_out_event(late)
            return
        finally:
            for choice in choices:
                choice.generated.close()  # a client that went away: the rows are freed
        if request.include_usage:  # as OpenAI sends it: a chunk of its own, with no choices
            generated = sum(len(choice.steps) for choice in choices)
            yield "data: " + json.dumps({"id": ident, "object": "chat.completion.chunk", "created": created,
                                         "model": request.model, "choices": [],
                                         "usage": usage(prompt.ids, generated, streams[0].sequence.cached)}) + "\n\n"
        yield "data: [DONE]\n\n"

    def _stops(self, request: ChatRequest):
        return (lambda steps: self._stop_at(steps, request)) if request.stop else None

    def _text(self, tokens: list[int], skip_special: bool) -> str:
        kept = [t for t in tokens if t not in self.engine.stop_ids]
        return self.renderer.tokenizer.decode(kept, skip_special_tokens=skip_special)

    def _stop_at(self, steps: list[Any], request: ChatRequest) -> int | None:
        """Where the answer's text (as it is parsed: special tokens kept when tools are offered) first holds a stop
        string, or None."""
        text = self._text([s.token for s in steps], skip_special=not request.tools)
        found = [i for i in (text.find(stop) for stop in request.stop) if i >= 0]
        return min(found) if found else None

    def _message(self, tokens: list[int], request: ChatRequest, cut: int | None = None) -> tuple[dict[str, Any], str]:
        stopped = cut is not None or (bool(tokens) and tokens[-1] in self.engine.stop_ids)
        if request.tools and self.tool_parser:
            offered = {(tool.get("function") or {}).get("name") for tool in request.tools if isinstance(tool, dict)}
            text = self._text(tokens, skip_special=False)[:cut]
            parsed = parse(self.tool_parser, text, offered)
            if parsed.calls:
                calls = parsed.calls if request.parallel_tool_calls else parsed.calls[:1]
                return {"role": "assistant", "content": parsed.content, "tool_calls": calls}, "tool_calls"
            # calls that cannot be read stay as the model wrote them, their markers included
            return {"role": "assistant", "content": text}, "stop" if stopped else "length"
        # the text as generated (as the stream sends it), without the stop token, cut at a stop string
        return {"role": "assistant", "content": self._text(tokens, skip_special=True)[:cut]}, \
            "stop" if stopped else "length"

    def _logprobs(self, steps: list[Any], request: ChatRequest) -> dict[str, Any] | None:
        """OpenAI's `logprobs.content` for these steps, when the request asked for them."""
        if request.top_logprobs is None:
            return None
        return {"content": [{**self._token_entry(step.token, step.logprob),
                             "top_logprobs": [self._token_entry(t, lp) for t, lp in step.top or ()]}
                            for step in steps]}

    def _token_entry(self, token: int, logprob: float | None) -> dict[str, Any]:
        text = self.renderer.tokenizer.decode([token])
        return {"token": text, "logprob": logprob, "bytes": list(text.encode())}


class _StreamedChoice:
    """One choice of a streamed answer: its steps so far, the text sent of them, and the chunks each new batch of
    steps sends (text as it is decoded, held back where a stop string or a character may be half written; with tools,
    nothing until the whole answer is parsed)."""

    def __init__(self, completer: Completer, request: ChatRequest, index: int, generated: Any, event) -> None:
        self.completer, self.request, self.index, self.generated, self.event = completer, request, index, generated, \
            event
        self.steps: list[Any] = []
        self.sent, self.logged, self.cut = "", 0, None

    def take(self, batch: list[Any]) -> bool:
        """Add a batch's steps; whether a stop string ended the choice."""
        self.cut = take(batch, self.steps, self.completer._stops(self.request))
        return self.cut is not None

    def deltas(self) -> Iterator[str]:
        if self.request.tools:
            return  # calls are parsed from the whole answer
        text = self.completer._text([s.token for s in self.steps], skip_special=True)
        safe = len(text) - _held_back(text, self.request.stop)
        if safe > len(self.sent) and not text[:safe].endswith("\ufffd"):  # hold back a half-decoded character
            yield self.event(self.index, {"content": text[len(self.sent):safe]},
                             logprobs=self.completer._logprobs(self.steps[self.logged:], self.request))
            self.sent, self.logged = text[:safe], len(self.steps)

    def ending(self) -> Iterator[str]:
        """What was held back (or, with tools, the whole parsed answer), then the choice's finish."""
        completer, request = self.completer, self.request
        message, finish = completer._message([step.token for step in self.steps], request, self.cut)
        if request.tools:
            delta: dict[str, Any] = {}
            if message["content"]:
                delta["content"] = message["content"]
            if message.get("tool_calls"):
                delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
            if delta:
                yield self.event(self.index, delta, logprobs=completer._logprobs(self.steps, request))
        elif len(message["content"]) > len(self.sent):
            yield self.event(self.index, {"content": message["content"][len(self.sent):]},
                             logprobs=completer._logprobs(self.steps[self.logged:], request))
        yield self.event(self.index, {}, finish)


def usage(prompt: list[int], generated: int, cached: int) -> dict[str, Any]:
    """OpenAI's usage of one answer; `cached`: the prompt's tokens taken from a kept prefix."""
    return {"prompt_tokens": len(prompt), "completion_tokens": generated, "total_tokens": len(prompt) + generated,
            "prompt_tokens_details": {"cached_tokens": cached}}


def take(batch: list[Any], steps: list[Any], stop_at) -> int | None:
    """Add a batch's steps to `steps`, up to the one whose text completes a stop string (`stop_at(steps)`: where
    it begins, or None; `stop_at` None: the request has no stops); where it begins, or None."""
    for step in batch:
        steps.append(step)
        if stop_at is not None and (cut := stop_at(steps)) is not None:
            return cut
    return None


def timed_out_event(late: Exception) -> str:
    """A stream's last event when its request ran past the endpoint's time limit, then `[DONE]`."""
    error = {"error": {"message": str(late), "type": "timeout", "param": None, "code": "request_timeout"}}
    return f"data: {json.dumps(error)}\n\ndata: [DONE]\n\n"


def _held_back(text: str, stops: tuple[str, ...]) -> int:
    """How many characters at the end of `text` could begin a stop string (not sent until it is known)."""
    longest = 0
    for stop in stops:
        for size in range(min(len(stop) - 1, len(text)), 0, -1):
            if text.endswith(stop[:size]):
                longest = max(longest, size)
                break
    return longest


def _completion_id() -> str:
    return f"chatcmpl-{secrets.token_hex(12)}"
