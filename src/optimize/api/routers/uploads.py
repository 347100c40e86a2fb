"""Dataset upload sessions: open, stream shards (validated as they arrive), commit."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from optimize.api.deps import RegistryDep
from optimize.registry import uploads

router = APIRouter(prefix="/v1/registry/dataset-uploads", tags=["registry"])

# Hand bytes to the validating thread in pieces of this size: big enough that thread hops cost little,
# small enough that memory stays flat.
BATCH_BYTES = 1024 * 1024


class ShardEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    index: int = Field(description="Position of the shard in the version, from 0")
    path: str = Field(description="examples.jsonl, or examples-NNNNN.jsonl for sharded versions")
    sha256: str = Field(description="sha256 of the shard's bytes, 64 hex digits")
    bytes: int = Field(description="Size of the shard in bytes")
    lines: int = Field(description="Lines in the shard")


class UploadCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    dataset: str = Field(description="NS/NAME the version is registered under")
    format: str = Field(description="chat-jsonl-v1 or preference-jsonl-v1")
    shards: list[ShardEntry] = Field(description="The version's shards, in order")


class UploadCommit(BaseModel):
    model_config = ConfigDict(extra="forbid")
    alias: str | None = Field(default=None, description="Alias to point at the registered version")


@router.post("")
def create_upload(body: UploadCreate, registry: RegistryDep) -> dict:
    return uploads.create_upload(registry, body.model_dump())


@router.put("/{upload_id}/shards/{index}")
async def put_shard(upload_id: str, index: int, request: Request, registry: RegistryDep) -> JSONResponse:
    receiver = await run_in_threadpool(uploads.open_shard, registry, upload_id, index)
    if isinstance(receiver, dict):
        return JSONResponse(receiver)
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
        result = await run_in_threadpool(receiver.finish)
    except BaseException:
        receiver.abort()
        raise
    return JSONResponse(result, status_code=201)


@router.post("/{upload_id}/commit")
def commit_upload(upload_id: str, registry: RegistryDep, body: UploadCommit | None = None) -> dict:
    return uploads.commit_upload(registry, upload_id, body.alias if body else None)
