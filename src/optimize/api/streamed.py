"""A request body streamed into a receiver (a dataset shard, a bundle's archive, an adapter's file): its chunks
handed to the receiver's thread in pieces of about a megabyte — big enough that thread hops cost little, small
enough that memory stays flat — then `finish`, or `abort` on any failure (a refusal, a client gone). A PUT of such
bytes answers 201 with what was received, or 200 with what the server held already (nothing read)."""

from __future__ import annotations

from typing import Any, Protocol

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from optimize.schemas.common import Answer

BATCH_BYTES = 1024 * 1024


class Receiver(Protocol):
    def feed(self, chunk: bytes) -> None: ...

    def finish(self) -> Any: ...

    def abort(self) -> None: ...


async def receive(request: Request, receiver: Receiver) -> Any:
    """What the receiver answers once the whole body is in."""
    pending: list[bytes] = []
    pending_bytes = 0
    try:
        async for chunk in request.stream():
            pending.append(chunk)
            pending_bytes += len(chunk)
            if pending_bytes >= BATCH_BYTES:
                await run_in_threadpool(receiver.feed, b"".join(pending))
                pending, pending_bytes = [], 0
        if pending:
            await run_in_threadpool(receiver.feed, b"".join(pending))
        return await run_in_threadpool(receiver.finish)
    except BaseException:
        receiver.abort()
        raise


def declared_size(request: Request) -> int | None:
    """The size the request's Content-Length declares, when it declares one."""
    declared = request.headers.get("content-length")
    return int(declared) if declared and declared.isdigit() else None


async def put_answer(request: Request, opened: Receiver | Answer) -> JSONResponse:
    """200 with the answer for bytes the server holds already, else 201 with what the receiver answers once the
    body is in."""
    if isinstance(opened, Answer):
        return JSONResponse(opened.model_dump(mode="json", by_alias=True))
    received = await receive(request, opened)
    return JSONResponse(received.model_dump(mode="json", by_alias=True), status_code=201)
