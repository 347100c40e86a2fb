"""Request bodies have a size limit per route family, refused with 413 naming it before the body is read whole:
control documents (JSON) up to `OPTIMIZE_MAX_JSON_BYTES` (default 1 MiB — a run plan is a few KiB), dataset
shards by the registry's shard limit (checked by the upload route against the size it declared), bundle archives
(`application/zip`) by the bundle archive limit (checked by the archive route, declared size first). Workers' routes
(`/v1/internal/…`) are fenced by their lease and carry their own payloads.

The declared Content-Length is checked first; a body sent without one (chunked) is counted as it arrives.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from optimize.api.bodies import is_json_body
from optimize.api.problems import send_problem
from optimize.core.environment import setting


def max_json_bytes() -> int:
    return setting("OPTIMIZE_MAX_JSON_BYTES")


class BodyTooLarge(Exception):
    pass


class BodyLimits:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.limit = max_json_bytes()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith("/v1/internal/") or not is_json_body(scope):
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.limit:
            await _refuse(scope, receive, send, self.limit)
            return
        received = 0
        started = False

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise BodyTooLarge
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except BodyTooLarge:
            if not started:
                await _refuse(scope, receive, send, self.limit)



def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _refuse(scope: Scope, receive: Receive, send: Send, limit: int) -> None:
    await send_problem(scope, receive, send, 413, "too_large",
                       f"the request body is larger than the {limit:,}-byte limit for JSON documents",
                       hint="send a smaller document (an operator may raise OPTIMIZE_MAX_JSON_BYTES)")
