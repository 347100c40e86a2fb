"""OpenAI's legacy text completions (`/v1/completions`) over a serving engine: a raw prompt (no chat template),
continued by the same batched engine as chat completions, with `echo` and `logprobs` so that log-likelihood
evaluation works (a harness sends context and continuation with `max_tokens: 0, echo: true, logprobs: N` and reads
each prompt token's log-probability).

A request may carry several prompts (a harness batches them): each gets a choice, with its index, all answered in
the same running batch. Parameters are honoured or refused naming them, as for chat completions: `suffix`,
`best_of` above 1 are refused; penalties, a logit bias, `top_k`, `min_p` and `repetition_penalty` shape sampling
(`serving.sampling`); `stream` streams one prompt's text without `echo` or `logprobs`.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from optimize.serving.batcher import RequestTimedOut
from optimize.serving.completions import (
    MOST_MAX_TOKENS,
    RequestError,
    read_seed,
    read_stop,
    take,
    timed_out_event,
)
from optimize.serving.sampling import Shaping, check_vocabulary, read_shaping

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for this endpoint
MOST_LOGPROBS = 5
MOST_PROMPTS = 64  # prompts one request may batch
FIELDS = frozenset({"model", "prompt", "max_tokens", "temperature", "top_p", "n", "stream", "stream_options",
                    "logprobs", "echo", "stop", "seed", "suffix", "best_of", "frequency_penalty", "presence_penalty",
                    "logit_bias", "user", "top_k", "min_p", "repetition_penalty"})


@dataclass(frozen=True)
class TextRequest:
    model: str
    prompts: tuple[str | list[int], ...]
    max_tokens: int
    temperature: float
    top_p: float
    stream: bool
    logprobs: int | None
    echo: bool
    stop: tuple[str, ...]
    seed: int | None
    shaping: Shaping = field(default_factory=Shaping)


def read_text_request(body: Any) -> TextRequest:
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        raise RequestError(f"unrecognized request argument(s): {', '.join(unknown)}", unknown[0])
    prompts = _prompts(body.get("prompt"))
    for name, allowed in (("n", (None, 1)), ("best_of", (None, 1)), ("suffix", (None,))):
        if body.get(name) not in allowed:
            raise RequestError(f"{name} is not supported by this endpoint"
                               + (" above 1" if name in ("n", "best_of") else "; leave it out"), name)
    shaping = read_shaping(body)
    echo = body.get("echo") or False
    if type(echo) is not bool:
        raise RequestError("echo must be true or false", "echo")
    max_tokens = DEFAULT_MAX_TOKENS if body.get("max_tokens") is None else body["max_tokens"]
    least = 0 if echo else 1  # nothing generated: the echoed prompt's log-probabilities only
    if type(max_tokens) is not int or not least <= max_tokens <= MOST_MAX_TOKENS:
        raise RequestError(f"max_tokens must be an integer from {least} to {MOST_MAX_TOKENS:,}"
                           + (" (0 with echo: true)" if not echo else ""), "max_tokens")
    logprobs = body.get("logprobs")
    if logprobs is not None and (type(logprobs) is not int or not 0 <= logprobs <= MOST_LOGPROBS):
        raise RequestError(f"logprobs must be an integer from 0 to {MOST_LOGPROBS}", "logprobs")
    temperature = 1.0 if body.get("temperature") is None else body["temperature"]
    top_p = 1.0 if body.get("top_p") is None else body["top_p"]
    for name, value, high in (("temperature", temperature, 2.0), ("top_p", top_p, 1.0)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= high:
            raise RequestError(f"{name} must be a number from 0 to {high:g}", name)
    if top_p == 0:
        temperature, top_p = 0.0, 1.0
    stream = bool(body.get("stream"))
    if stream and (echo or logprobs is not None or len(prompts) > 1):
        raise RequestError("stream takes one prompt, without echo or logprobs here; leave stream out", "stream")
    return TextRequest(str(body.get("model") or ""), prompts, max_tokens, float(temperature), float(top_p), stream,
                       logprobs, echo, read_stop(body.get("stop")), read_seed(body.get("seed")), shaping)


def _prompts(prompt: Any) -> tuple[str | list[int], ...]:
    """`prompt`: a string, a list of token ids, or a list of either (a batch)."""
    def one(item: Any) -> bool:
        return (isinstance(item, str) and bool(item)) or (
            isinstance(item, list) and bool(item) and all(type(t) is int and t >= 0 for t in item))

    if one(prompt):
        return (prompt,)
    if isinstance(prompt, list) and 1 <= len(prompt) <= MOST_PROMPTS and all(
            isinstance(item, (str, list)) and one(item) for item in prompt):
        return tuple(prompt)
    raise RequestError(f"prompt must be a non-empty string or list of token ids, or a list of 1 to {MOST_PROMPTS} "
                       "of them", "prompt")


class TextCompleter:
    """Answers text completions for one endpoint: its engine and the base model's tokenizer."""

    def __init__(self, engine, tokenizer, context_length: int | None) -> None:
        self.engine, self.tokenizer, self.context_length = engine, tokenizer, context_length

    def _ids(self, request: TextRequest, prompt: str | list[int]) -> list[int]:
        ids = list(prompt) if isinstance(prompt, list) else self.tokenizer(prompt)["input_ids"]
        vocabulary = len(self.tokenizer)
        outside = next((token for token in ids if token >= vocabulary), None)
        if outside is not None:  # the model has no embedding for it (an index error, or a device assert on a GPU)
            raise RequestError(f"prompt holds token id {outside}, outside the model's vocabulary; token ids go from 0 "
                               f"to {vocabulary - 1:,}", "prompt")
        check_vocabulary(request.shaping, vocabulary)
        if self.context_length and len(ids) + request.max_tokens > self.context_length:
            room = self.context_length - len(ids)
            if room < (0 if request.max_tokens == 0 else 1):
                raise RequestError(f"the prompt is {len(ids)} tokens, and the model's context is "
                                   f"{self.context_length}", "prompt")
        return ids

    def _limit(self, request: TextRequest, ids: list[int]) -> int:
        room = (self.context_length - len(ids)) if self.context_length else request.max_tokens
        return max(1, min(request.max_tokens, room))

    def complete(self, adapter: str | None, request: TextRequest) -> dict[str, Any]:
        """Every prompt's choice; the prompts join the running batch together (each is submitted before any is
        read), and a refusal of one (a full endpoint) lets go of the others."""
        prompts = [self._ids(request, prompt) for prompt in request.prompts]
        streams: list[Any] = []
        try:
            if request.max_tokens:
                for ids in prompts:
                    streams.append(self._stream(adapter, request, ids, request.logprobs))
            choices = [self._choice(index, adapter, request, ids, streams[index] if streams else None)
                       for index, ids in enumerate(prompts)]
        finally:
            for stream in streams:
                stream.close()
        generated = sum(choice.pop("_generated") for choice in choices)
        prompt_tokens = sum(len(ids) for ids in prompts)
        return {"id": _completion_id(), "object": "text_completion", "created": int(time.time()),
                "model": request.model, "choices": choices,
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": generated,
                          "total_tokens": prompt_tokens + generated}}

    def _choice(self, index: int, adapter: str | None, request: TextRequest, ids: list[int], generated):
        steps: list[Any] = []
        cut, finish = None, "length"
        if generated is not None:
            for batch in generated.batches():
                if (cut := take(batch, steps, self._stops(request))) is not None:
                    break
            generated.close()
            stopped = cut is not None or steps[-1].token in self.engine.stop_ids
            finish = "stop" if stopped else "length"
        text = self._text([s.token for s in steps])[:cut]
        choice = {"index": index, "text": (self.tokenizer.decode(ids) + text) if request.echo else text,
                  "finish_reason": finish, "logprobs": None, "_generated": len(steps)}
        if request.logprobs is not None:
            scored = self.engine.score(adapter, ids, request.logprobs) if request.echo else []
            choice["logprobs"] = self._logprobs(ids[0] if request.echo else None, scored + steps)
        return choice

    def chunks(self, adapter: str | None, request: TextRequest) -> Iterator[str]:
        ids = self._ids(request, request.prompts[0])
        return self._chunks(request, ids, self._stream(adapter, request, ids, None))

    def _stream(self, adapter: str | None, request: TextRequest, ids: list[int], logprobs: int | None):
        extra = {"shaping": request.shaping} if request.shaping.shapes else {}  # never asked of an engine that cannot
        return self.engine.stream(adapter, ids, self._limit(request, ids), request.temperature, request.top_p,
                                  request.seed, logprobs, **extra)

    def _chunks(self, request: TextRequest, ids: list[int], generated) -> Iterator[str]:
        ident, created = _completion_id(), int(time.time())

        def event(text: str, finish: str | None = None) -> str:
            return "data: " + json.dumps({"id": ident, "object": "text_completion", "created": created,
                                          "model": request.model, "choices": [{"index": 0, "text": text,
                                                                               "logprobs": None,
                                                                               "finish_reason": finish}]}) + "\n\n"

        steps: list[Any] = []
        sent, cut = "", None
        try:
            for batch in generated.batches():  # under load several tokens come at once: one chunk
                if (cut := take(batch, steps, self._stops(request))) is not None:
                    break
                text = self._text([s.token for s in steps])
                if len(text) > len(sent) and not text.endswith("\ufffd") and not request.stop:
                    yield event(text[len(sent):])
                    sent = text
        except RequestTimedOut as late:
            yield timed_out_event(late)
            return
        finally:
            generated.close()
        text = self._text([s.token for s in steps])[:cut]
        stopped = cut is not None or (bool(steps) and steps[-1].token in self.engine.stop_ids)
        yield event(text[len(sent):], "stop" if stopped else "length")
        yield "data: [DONE]\n\n"

    def _stops(self, request: TextRequest):
        return (lambda steps: self._stop_at(steps, request)) if request.stop else None

    def _text(self, tokens: list[int]) -> str:
        return self.tokenizer.decode([t for t in tokens if t not in self.engine.stop_ids], skip_special_tokens=True)

    def _stop_at(self, steps: list[Any], request: TextRequest) -> int | None:
        text = self._text([s.token for s in steps])
        found = [i for i in (text.find(stop) for stop in request.stop) if i >= 0]
        return min(found) if found else None

    def _logprobs(self, first: int | None, steps: list[Any]) -> dict[str, Any]:
        """OpenAI's legacy logprobs: tokens, token_logprobs, top_logprobs and text_offset over the echoed prompt
        (its first token has no log-probability) and the generated tokens."""
        entries = ([(first, None, None)] if first is not None else []) + [(s.token, s.logprob, s.top)
                                                                          for s in steps]
        tokens, offsets, offset = [], [], 0
        for token, _, _ in entries:
            text = self.tokenizer.decode([token])
            tokens.append(text)
            offsets.append(offset)
            offset += len(text)
        return {"tokens": tokens, "token_logprobs": [lp for _, lp, _ in entries],
                "top_logprobs": [None if top is None else {self.tokenizer.decode([t]): v for t, v in top}
                                 for _, _, top in entries],
                "text_offset": offsets}


def _completion_id() -> str:
    return f"cmpl-{secrets.token_hex(12)}"
