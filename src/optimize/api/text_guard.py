"""Refuses a NUL character anywhere a request carries text — its path, its query and its JSON body — before any
route runs. PostgreSQL cannot keep one in a text field (it fails the statement: a 500) while SQLite keeps it, so the
same request would answer differently on the two stores; here both refuse it, naming where it is.

JSON bodies are read whole first (they are small control documents; dataset shards, streamed as NDJSON into the
blob store, are not JSON bodies and pass untouched) and scanned for the `\\u0000` escape; only a body that holds one
is parsed, to name the field.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import parse_qsl

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from optimize.api.bodies import is_json_body
from optimize.api.problems import send_problem

NUL_ESCAPE = re.compile(rb"\\u0000", re.IGNORECASE)
# a UTF-16 surrogate escape (\ud800-\udfff): a valid pair decodes to one character, a lone one to a string that
# cannot be encoded as UTF-8 (so neither stored nor answered: a 500 on both stores)
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
HINT = "remove the NUL character (\\u0000); no name, reference or text here can hold one"
SURROGATE_HINT = ("a \\ud800-\\udfff escape must be half of a surrogate pair; send the character itself, or its "
                  "pair of escapes")


class TextGuard:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        where = _in_url(scope)
        if where is None and is_json_body(scope):
            body, receive = await _buffered(receive)
            where = _in_body(body)
            if where is None:
                where = _surrogate_in_body(body)
                if where is not None:
                    await _refuse(scope, receive, send,
                                  f"{where} holds a lone surrogate (an unpaired \\ud800-\\udfff escape)",
                                  SURROGATE_HINT)
                    return
        if where is not None:
            await _refuse(scope, receive, send, f"{where} holds a NUL character")
            return
        await self.app(scope, receive, send)


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
