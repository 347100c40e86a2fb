"""Images of chat rows, kept under the sha256 of their bytes: which the registry holds, and one image streamed in
(checked as an image before it is kept)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response, StreamingResponse

from optimize.api.bodies import documented_as, required_body, streamed_body
from optimize.api.deps import RegistryDep
from optimize.api.streamed import put_answer
from optimize.core.errors import Invalid
from optimize.registry import images
from optimize.schemas.registry import HeldImages, HeldImagesRequest, ImageReceived

router = APIRouter(prefix="/v1/registry/images", tags=["registry"])


@router.post("/held", response_model=HeldImages, openapi_extra=required_body())
def held(registry: RegistryDep, body: Annotated[Any, documented_as(HeldImagesRequest), Body()] = None
         ) -> HeldImages:
    """Which of the images named (by sha256) the registry holds, and which it lacks."""
    if not isinstance(body, dict) or not isinstance(body.get("sha256"), list):
        raise Invalid('the request body must be {"sha256": [image digests]}')
    return images.held_images(registry, body["sha256"])


@router.get("/{sha256}", response_class=Response,
            responses={200: {"description": "The image's bytes, as sent", "content": {
                media_type: {"schema": {"type": "string", "format": "binary",
                                        "description": "The image's bytes; its sha256 is in X-Checksum-Sha256"}}
                for media_type in images.MEDIA_TYPES.values()}}})
async def get_image(sha256: str, registry: RegistryDep) -> StreamingResponse:
    """An image a dataset version the token sees names (the dashboard's row viewer shows them)."""
    media_type, digest = await run_in_threadpool(images.readable_image, registry, sha256)
    size, chunks = await run_in_threadpool(registry.blobs.stream, digest)
    return StreamingResponse(chunks, media_type=media_type, headers={
        "Content-Length": str(size), "X-Checksum-Sha256": digest, "X-Content-Type-Options": "nosniff",
        "Cache-Control": "private, max-age=86400, immutable"})


@router.put("/{sha256}", response_model=ImageReceived, status_code=201,
            response_description="The image was received, checked and stored",
            responses={200: {"model": ImageReceived, "description": "The registry held the image already"}},
            openapi_extra=streamed_body("application/octet-stream", "The image's bytes (PNG, JPEG, WebP or GIF), "
                                        "whose sha256 is the path's; not read when the registry holds it already"))
async def put_image(sha256: str, request: Request, registry: RegistryDep) -> JSONResponse:
    return await put_answer(request, await run_in_threadpool(images.open_image, registry, sha256))
