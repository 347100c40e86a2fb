"""The one status stream behind every kind's `GET …/{id}/events` (server-sent events): the item's status now,
then its status again after each event recorded for it (a phase, progress, a snapshot, an adapter loaded), until
it is settled (ended, paused, or at rest: an endpoint answering with every model), with keep-alive comments
while nothing happens.

The event cursor is read before the status, so a change made while the status is read shows up in a later
update rather than being missed; between events only the cursor is read (one indexed query).

A stream holds a connection and a poll for as long as it is open, so each token holds a limited number of them
(api.stream_slots)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from optimize.api.stream_slots import HeldStream, take_slot
from optimize.schemas.common import Answer
from optimize.store.events import latest

POLL_SECONDS = 0.5
KEEPALIVE_SECONDS = 5.0


async def status_events(request: Request, get: Callable[[Any, str], Answer], deployment: Any,
                        item_id: str, id_key: str, kind: str) -> StreamingResponse:
    """`get(deployment, id)` gives the status, as its answer (an unknown id is refused before the stream starts),
    which the stream sends as the item's GET would; `id_key` is the id's key in it; `kind` names
    the item's events (`run:<id>`, `evaluation:<id>`, …). The caller's token holds one of its stream slots while the
    stream is open (429 when it holds them all)."""
    def read(_deployment: Any, read_id: str) -> dict[str, Any]:
        return get(_deployment, read_id).model_dump(mode="json", by_alias=True)

    first = await run_in_threadpool(read, deployment, item_id)
    subject = f"{kind}:{first[id_key]}"
    cursor = await run_in_threadpool(_cursor, deployment, subject)
    first = await run_in_threadpool(read, deployment, first[id_key])  # read after the cursor
    slot = take_slot(request)  # last: nothing between here and the response can fail and keep the slot

    async def stream():
        nonlocal cursor
        try:
            last, quiet = first, 0.0
            yield _sse(last)
            while not last["settled"]:
                await asyncio.sleep(POLL_SECONDS)
                now = await run_in_threadpool(_cursor, deployment, subject)
                if now != cursor:
                    cursor, quiet = now, 0.0
                    status = await run_in_threadpool(read, deployment, last[id_key])
                    if status != last:
                        last = status
                        yield _sse(status)
                    continue
                quiet += POLL_SECONDS
                if quiet >= KEEPALIVE_SECONDS:
                    quiet = 0.0
                    yield ": keep-alive\n\n"
        finally:
            if slot is not None:
                slot.release()

    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    if slot is None:
        return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)
    return HeldStream(stream(), slot, media_type="text/event-stream", headers=headers)


def _cursor(deployment: Any, subject: str) -> int:
    with deployment.store.transaction() as session:
        return latest(session, subject)


def _sse(status: dict[str, Any]) -> str:
    return f"event: status\ndata: {json.dumps(status)}\n\n"
