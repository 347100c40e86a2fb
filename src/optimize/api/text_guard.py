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

NUL_ESCAPE = re.compile(rb"\\u0000", re.IGNORECASE)
HINT = "remove the NUL character (\\u0000); no name, reference or text here can hold one"


class TextGuard:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        where = _in_url(scope)
        if where is None and _is_json(scope):
            body, receive = await _buffered(receive)
            where = _in_body(body)
        if where is not None:
            await _refuse(send, f"{where} holds a NUL character")
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


def _is_json(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"content-type":
            return b"json" in value.lower() and b"ndjson" not in value.lower()
    return False


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
    path = _field_with_nul(document, "")
    return f"field {path}" if path else "the body"


def _field_with_nul(value: Any, path: str) -> str | None:
    if isinstance(value, str):
        return path or "(the body)" if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{path}.{key}" if path else str(key)
            if "\x00" in key:
                return here.replace("\x00", "\\u0000")
            found = _field_with_nul(item, here)
            if found:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _field_with_nul(item, f"{path}[{index}]")
            if found:
                return found
    return None


async def _refuse(send: Send, detail: str) -> None:
    body = json.dumps({"type": "https://optimize.dev/problems/invalid", "title": "Invalid input", "status": 422,
                       "code": "invalid", "detail": detail, "hint": HINT}).encode()
    await send({"type": "http.response.start", "status": 422,
                "headers": [(b"content-type", b"application/problem+json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
