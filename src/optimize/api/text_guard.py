"""Refuses a NUL character anywhere a request carries text — its path, its query and its JSON body — before any
route runs. PostgreSQL cannot keep one in a text field (it fails the statement: a 500) while SQLite keeps it, so the
same request would answer differently on the two stores; here both refuse it, naming where it is.

JSON bodies are read whole first (they are small control documents; dataset shards, streamed as NDJSON into the
blob store, are not JSON bodies and pass untouched) and scanned for the `\\u0000` escape; only a body that holds one
is parsed, to name the field. A body sent with no Content-Type is read as JSON by the routes, so it is checked too
(up to the JSON body limit; a PUT, a shard's or an archive's, streams its bytes and is left alone).

A JSON body may not hold `NaN`, `Infinity` or `-Infinity` either: Python's json reads them as floats, which no
answer can carry back and no worker can be sent (a 500 where one was echoed or passed on), and which are not JSON.
Nor a number too large for a float (`1e999`): JSON allows it, but Python reads it as infinity all the same.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import parse_qsl

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from optimize.api.bodies import is_json_body
from optimize.api.body_limits import max_json_bytes
from optimize.api.problems import send_problem
from optimize.core.errors import Invalid

NUL_ESCAPE = re.compile(rb"\\u0000", re.IGNORECASE)
# a UTF-16 surrogate escape (\ud800-\udfff): a valid pair decodes to one character, a lone one to a string that
# cannot be encoded as UTF-8 (so neither stored nor answered: a 500 on both stores)
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
HINT = "remove the NUL character (\\u0000); no name, reference or text here can hold one"
SURROGATE_HINT = ("a \\ud800-\\udfff escape must be half of a surrogate pair; send the character itself, or its "
                  "pair of escapes")
# what a body holds before it may hold a bare NaN or Infinity (checked by parsing only then: the words may be text)
# ... or a number past a float's range: an exponent of three digits or more, or a run of 300 digits
NON_FINITE = re.compile(rb"NaN|Infinity|\d[eE][+-]?\d{3}|\d{300}")
SHOWN_NUMBER = 40  # characters of an overflowing number a refusal quotes
NON_FINITE_HINT = "send a finite number in its place: JSON has no NaN or Infinity"


class TextGuard:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        where = _in_url(scope)
        if where is None and _read_as_json(scope):
            body, receive = await _buffered(receive)
            where = _in_body(body)
            if where is None:
                where = _surrogate_in_body(body)
                if where is not None:
                    await _refuse(scope, receive, send,
                                  f"{where} holds a lone surrogate (an unpaired \\ud800-\\udfff escape)",
                                  SURROGATE_HINT)
                    return
                found = non_finite_in(body)
                if found is not None:
                    await _refuse(scope, receive, send, found, NON_FINITE_HINT)
                    return
        if where is not None:
            await _refuse(scope, receive, send, f"{where} holds a NUL character")
            return
        await self.app(scope, receive, send)


def _read_as_json(scope: Scope) -> bool:
    """Whether the routes read the body as one JSON document: it says it is JSON, or it says nothing (FastAPI parses
    a body without a Content-Type as JSON) and is a small POST or PATCH to a route behind the gate."""
    if is_json_body(scope):
        return True
    if scope["method"] not in ("POST", "PATCH") or scope["path"].startswith("/v1/internal/"):
        return False
    length = None
    for name, value in scope["headers"]:
        if name == b"content-type":
            return False
        if name == b"content-length":
            length = int(value) if value.isdigit() else None
    return length is not None and 0 < length <= max_json_bytes()


def _in_url(scope: Scope) -> str | None:
    if "\x00" in scope["path"]:
        return "the path"
    query = scope.get("query_string", b"")
    if b"%00" in query.lower() or b"\x00" in query:
        for name, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
            if "\x00" in name or "\x00" in value:
                return f"query parameter {name.replace(chr(0), '')!r}"
        return "the query"
    return None



async def _buffered(receive: Receive) -> tuple[bytes, Receive]:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    body = b"".join(chunks)
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return body, replay


def _in_body(body: bytes) -> str | None:
    if not NUL_ESCAPE.search(body):
        return None
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None  # not JSON: the route refuses it in its own words
    return _field_with(document, "", lambda text: "\x00" in text) or "the body"


def _surrogate_in_body(body: bytes) -> str | None:
    if not SURROGATE_ESCAPE.search(body):
        return None
    try:
        document = json.loads(body)  # keeps a lone surrogate (orjson refuses the document without naming where)
    except (ValueError, RecursionError):
        return None  # not JSON: the route refuses it in its own words
    return _field_with(document, "", _is_surrogate)


class _NonFinite(str):
    """A bare NaN, Infinity or -Infinity where the body holds one, as parsing found it (a string of its own kind, so
    that the walk that names where a string is names where it is)."""


def _finite_or_marked(text: str) -> float | _NonFinite:
    """A number literal as a float, or marked where it overflows to infinity (quoted as sent, cut if long)."""
    value = float(text)
    if value in (float("inf"), float("-inf")):
        return _NonFinite(text if len(text) <= SHOWN_NUMBER else f"{text[:SHOWN_NUMBER]}…")
    return value


def non_finite_in(body: bytes) -> str | None:
    """`field a.b[2] is NaN, not a finite number` (or `the body is …`) for the first bare NaN, Infinity or -Infinity
    a JSON body holds, or a number that overflows to infinity; None when it holds none, or is not JSON (the route
    refuses that in its own words)."""
    if not NON_FINITE.search(body):
        return None
    try:
        document = json.loads(body, parse_constant=_NonFinite, parse_float=_finite_or_marked)
    except (ValueError, RecursionError):
        return None
    found: list[str] = []

    def non_finite(text: str) -> bool:
        if isinstance(text, _NonFinite):
            found.append(str(text))
            return True
        return False

    where = _field_with(document, "", non_finite)
    return f"{where} is {found[0]}, not a finite number" if where else None


def _shown(key: str) -> str:
    """A key as a refusal names it: a NUL or a lone surrogate written as its escape, never as itself (no answer
    could carry it)."""
    return "".join(f"\\u{ord(c):04x}" if c == "\x00" or "\ud800" <= c <= "\udfff" else c for c in key)


def _is_surrogate(text: str) -> bool:
    return any("\ud800" <= character <= "\udfff" for character in text)


def _field_with(value: Any, path: str, found_in) -> str | None:
    """`field a.b[2]` (or `the body`) where the first string `found_in` holds is, keys included."""
    if isinstance(value, str):
        return (f"field {path}" if path else "the body") if found_in(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{path}.{_shown(key)}" if path else _shown(key)
            if found_in(key):
                return f"field {here}"
            found = _field_with(item, here, found_in)
            if found:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _field_with(item, f"{path}[{index}]", found_in)
            if found:
                return found
    return None


async def _refuse(scope: Scope, receive: Receive, send: Send, detail: str, hint: str = HINT) -> None:
    await send_problem(scope, receive, send, 422, "invalid", detail, hint=hint)


def json_of(raw: bytes, asked: str) -> Any:
    """A body read as JSON whatever its Content-Type says, as OpenAI's routes read theirs (`curl -d` sends JSON as
    a form); `asked` says what to send when it is nested too deeply to read."""
    non_finite = non_finite_in(raw)  # a body not sent as JSON passed the guard in front of the routes
    if non_finite is not None:
        raise Invalid(non_finite, hint=NON_FINITE_HINT)
    try:
        return json.loads(raw or b"null")
    except ValueError:
        raise Invalid("the request body is not JSON") from None
    except RecursionError:
        raise Invalid("the request body is nested too deeply to read", hint=asked) from None
