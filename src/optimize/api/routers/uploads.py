"""Dataset upload sessions: open, stream shards (validated as they arrive), commit; and the preview of an upload,
which opens nothing."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from optimize.api.bodies import documented_as, required_body, streamed_body
from optimize.api.deps import RegistryDep
from optimize.api.streamed import put_answer
from optimize.registry import uploads
from optimize.schemas.registry import CommittedVersion
from optimize.schemas.uploads import (
    ShardReceived,
    UploadCommit,
    UploadCreate,
    UploadPreview,
    UploadPreviewRequest,
    UploadSession,
)

router = APIRouter(prefix="/v1/registry/dataset-uploads", tags=["registry"])


@router.post("", response_model=UploadSession)
def create_upload(body: UploadCreate, registry: RegistryDep) -> UploadSession:
    return uploads.create_upload(registry, body.model_dump(by_alias=True))


@router.post("/preview", response_model=UploadPreview, openapi_extra=required_body())
def preview_upload(registry: RegistryDep,
                   body: Annotated[Any, documented_as(UploadPreviewRequest), Body()] = None) -> UploadPreview:
    """What opening an upload of these shards would find — the version's digest, the dataset's version of that
    digest if it holds one, which shards the registry holds — refused as the upload would be, but opening no
    session and storing nothing (`akka registry datasets register --no-upload`)."""
    return uploads.preview_upload(registry, UploadPreviewRequest.parse(body))


@router.put("/{upload_id}/shards/{index}", response_model=ShardReceived, status_code=201,
            response_description="The shard was received, checked and stored",
            responses={200: {"model": ShardReceived, "description": "The registry held the shard already"}},
            openapi_extra=streamed_body("application/x-ndjson", "The shard's bytes: JSONL, one example a line, "
                                        "exactly the bytes (size and sha256) the upload declared for it; not read "
                                        "when the registry holds the shard already"))
async def put_shard(upload_id: str, index: int, request: Request, registry: RegistryDep) -> JSONResponse:
    return await put_answer(request, await run_in_threadpool(uploads.open_shard, registry, upload_id, index))


@router.post("/{upload_id}/commit", response_model=CommittedVersion)
def commit_upload(upload_id: str, registry: RegistryDep, body: UploadCommit | None = None) -> CommittedVersion:
    return uploads.commit_upload(registry, upload_id, body.alias if body else None)
