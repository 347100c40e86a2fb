"""Tool-call parsers: the calls a model wrote into its answer, in each family's own format, as OpenAI
`tool_calls`. The catalog names a model's parser (`toolCallParser`); a model without one answers text only.

- `hermes` (Qwen2.5, SmolLM2 and the ChatML stand-ins): `<tool_call>{"name": .., "arguments": {..}}</tool_call>`.
- `llama3_json` (Llama 3.x): the answer is one JSON object `{"name": .., "parameters": {..}}` (or several,
  separated by `;`), optionally after `<|python_tag|>`.
- `gemma4`: `<|tool_call>call:NAME{key:value,..}<tool_call|>`, strings between `<|"|>` marks.
- `mistral`: `[TOOL_CALLS]` followed by a JSON list of `{"name": .., "arguments": {..}}`.

An answer whose calls cannot be read stays text: a parser never drops what the model wrote.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field
from typing import Any, Callable

PARSERS = ("hermes", "llama3_json", "gemma4", "mistral")


@dataclass
class Parsed:
    content: str | None
    calls: list[dict[str, Any]] = field(default_factory=list)


def parse(parser: str | None, text: str, offered: set[str] | None = None) -> Parsed:
    """The answer's text before its calls, and its calls as OpenAI tool calls (`arguments` a JSON string). With
    `offered`, an answer calling a tool not offered stays text (a JSON answer with a `name` is not a call)."""
    reader = _READERS.get(parser or "")
    if reader is None:
        return Parsed(text)
    try:
        found = reader(text)
    except (ValueError, TypeError, KeyError, IndexError):
        found = None
    if not found or (offered is not None and any(name not in offered for name, _ in found[1])):
        return Parsed(text)
    content, calls = found
    return Parsed(content.strip() or None, [_openai_call(name, arguments) for name, arguments in calls])


@dataclass
class Reading:
    """What an answer holds, read more closely than `parse` does (a distillation tells why it refuses one): its
    text before any calls, its calls as written (name, arguments), and whether it carries a call's markers that
    cannot be read."""

    content: str
    calls: list[tuple[str, Any]] = field(default_factory=list)
    unreadable: bool = False


_MARKERS = {"hermes": ("<tool_call>",), "llama3_json": ("<|python_tag|>",), "gemma4": ("<|tool_call>",),
            "mistral": ("[TOOL_CALLS]",)}


def read(parser: str | None, text: str) -> Reading:
    """The answer's text and its calls; `unreadable` where it has a call's markers (or, for llama3_json, is a JSON
    object naming a function) but its calls cannot be read."""
    reader = _READERS.get(parser or "")
    if reader is None:
        return Reading(text)
    try:
        found = reader(text)
    except (ValueError, TypeError, KeyError, IndexError):
        found = None
    if found:
        return Reading(found[0].strip(), list(found[1]))
    marked = any(marker in text for marker in _MARKERS.get(parser, ()))
    if parser == "llama3_json" and text.strip().startswith("{") and '"name"' in text:
        marked = True
    return Reading(text, unreadable=marked)


def _openai_call(name: str, arguments: Any) -> dict[str, Any]:
    return {"id": f"call_{secrets.token_hex(12)}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments if arguments is not None else {})}}


Found = tuple[str, list[tuple[str, Any]]] | None

_HERMES = re.compile(r"\s*<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def _hermes(text: str) -> Found:
    """Text, then one or more calls and nothing after them (an answer cut inside a call, or going on after its
    calls, stays text)."""
    start = text.find("<tool_call>")
    if start < 0:
        return None
    calls, at = [], start
    while at < len(text.rstrip()):
        match = _HERMES.match(text, at)
        if match is None:
            return None
        call = json.loads(match.group(1))
        calls.append((_name(call), call.get("arguments", call.get("parameters"))))
        at = match.end()
    return text[:start], calls


def _name(call: Any) -> str:
    if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
        raise ValueError("a call without a name")
    return call["name"]


def _llama3_json(text: str) -> Found:
    body = text.strip().removeprefix("<|python_tag|>").strip()
    if not body.startswith("{"):
        return None
    decoder, calls, at = json.JSONDecoder(), [], 0
    while at < len(body):  # objects one after another, `;` between them (never split inside a string)
        call, at = decoder.raw_decode(body, at)
        calls.append((_name(call), call.get("parameters", call.get("arguments"))))
        while at < len(body) and body[at] in "; \n\t":
            at += 1
    return "", calls


def _mistral(text: str) -> Found:
    if "[TOOL_CALLS]" not in text:
        return None
    head, _, body = text.partition("[TOOL_CALLS]")
    items = json.loads(body.strip())
    items = items if isinstance(items, list) else [items]
    if not items:
        return None
    return head, [(_name(item), item.get("arguments")) for item in items]


_GEMMA = re.compile(r"<\|tool_call>call:([^{\s]+)(\{.*?\})<tool_call\|>", re.DOTALL)
_QUOTE = '<|"|>'


def _gemma4(text: str) -> Found:
    matches = list(_GEMMA.finditer(text))
    if not matches:
        return None
    calls = []
    for match in matches:
        value, end = _GemmaReader(match.group(2)).value(0)
        calls.append((match.group(1), value))
    return text[:matches[0].start()], calls


class _GemmaReader:
    """Gemma 4's argument notation: `{key:value,..}`, `[..]`, `<|"|>text<|"|>`, and bare numbers, booleans, null."""

    def __init__(self, text: str) -> None:
        self.text = text

    def value(self, at: int) -> tuple[Any, int]:
        t = self.text
        if t.startswith(_QUOTE, at):
            end = t.index(_QUOTE, at + len(_QUOTE))
            return t[at + len(_QUOTE):end], end + len(_QUOTE)
        if t[at] == "{":
            result, at = {}, at + 1
            while t[at] != "}":
                key, at = self._key(at)
                result[key], at = self.value(at)
                at = self._after_item(at, "}")
            return result, at + 1
        if t[at] == "[":
            items, at = [], at + 1
            while t[at] != "]":
                item, at = self.value(at)
                items.append(item)
                at = self._after_item(at, "]")
            return items, at + 1
        end = at
        while end < len(t) and t[end] not in ",}]":
            end += 1
        word = t[at:end]
        if not word:
            raise ValueError(f"a value is missing at {at}")
        try:
            return json.loads(word), end
        except ValueError:
            return word, end

    def _after_item(self, at: int, closer: str) -> int:
        """Past the `,` after an item; an item must be followed by `,` or the bracket that closes it."""
        if self.text[at] == ",":
            return at + 1
        if self.text[at] != closer:
            raise ValueError(f"expected ',' or {closer!r} at {at}")
        return at

    def _key(self, at: int) -> tuple[str, int]:
        if self.text.startswith(_QUOTE, at):
            key, at = self.value(at)
        else:
            end = self.text.index(":", at)
            key, at = self.text[at:end], end
        if self.text[at] != ":":
            raise ValueError("a key without a value")
        return key, at + 1


_READERS: dict[str, Callable[[str], Found]] = {"hermes": _hermes, "llama3_json": _llama3_json, "gemma4": _gemma4,
                                                "mistral": _mistral}
