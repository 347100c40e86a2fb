"""Server-sent status by polling: an item's status now, then whenever it changes, until it is settled (ended, or
at rest: an endpoint answering with every model), with keep-alive comments while nothing changes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

POLL_SECONDS = 0.5
KEEPALIVE_SECONDS = 5.0


async def status_events(read: Callable[[Any, str], dict[str, Any]], training: Any, item_id: str, id_key: str
                        ) -> StreamingResponse:
    """`read(training, id)` gives the status; an unknown id is refused before the stream starts."""
    first = await run_in_threadpool(read, training, item_id)

    async def stream():
        last, quiet = first, 0.0
        yield f"event: status\ndata: {json.dumps(last)}\n\n"
        while not last["settled"]:
            await asyncio.sleep(POLL_SECONDS)
            now = await run_in_threadpool(read, training, last[id_key])
            quiet += POLL_SECONDS
            if now != last:
                last, quiet = now, 0.0
                yield f"event: status\ndata: {json.dumps(now)}\n\n"
            elif quiet >= KEEPALIVE_SECONDS:
                quiet = 0.0
                yield ": keep-alive\n\n"

    return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
