"""Adapters made elsewhere: `PUT /v1/registry/adapters/{ns}/{name}/files/{sha256}` (an adapter file's bytes, kept
under their sha256) and `POST /v1/registry/adapters/{ns}/{name}/import` (the two files checked against a selected
base model and registered as an ADAPTER version of NS/NAME)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from optimize.api.bodies import documented_as, streamed_body
from optimize.api.deps import DeploymentDep
from optimize.api.streamed import declared_size, put_answer
from optimize.schemas.models import AdapterImport, HeldFile, ImportedAdapter
from optimize.training.server import adapter_import

router = APIRouter(prefix="/v1/registry/adapters", tags=["registry"])


@router.put("/{namespace}/{name}/files/{sha256}", response_model=HeldFile, status_code=201,
            response_description="The file was received and kept under its sha256",
            responses={200: {"model": HeldFile, "description": "The registry held the file already"}},
            openapi_extra=streamed_body("application/octet-stream", "An adapter file's bytes (adapter_config.json or "
                                        "adapter_model.safetensors), exactly the bytes whose sha256 the path names; "
                                        "not read when the registry holds them already"))
async def put_file(namespace: str, name: str, sha256: str, request: Request, deployment: DeploymentDep
                   ) -> JSONResponse:
    """Send one of an adapter's files before importing it."""
    return await put_answer(request, await run_in_threadpool(
        adapter_import.open_file, deployment, namespace, name, sha256, declared_size(request)))


@router.post("/{namespace}/{name}/import", response_model=ImportedAdapter)
def import_adapter(namespace: str, name: str, deployment: DeploymentDep,
                   body: Annotated[Any, documented_as(AdapterImport), Body()]) -> ImportedAdapter:
    """Register a PEFT LoRA adapter made elsewhere, whose two files the registry holds, as a version of NS/NAME over
    a selected base model: refused, naming the base, the module and both shapes, when it does not fit; the weights
    digest is recorded and the lineage says `imported`. The same adapter again answers the version it already is
    (`created: false`)."""
    return adapter_import.import_adapter(deployment, namespace, name, AdapterImport.parse(body))
