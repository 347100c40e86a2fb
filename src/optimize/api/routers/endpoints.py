"""Endpoints: `POST /v1/training/endpoints`, `GET …[?project=&phase=&model=]`, `GET …/info`, `GET …/{id}`,
`DELETE …/{id}`,
`POST …/{id}/detach`, `GET …/{id}/events` (server-sent events) and `POST …/{id}/chat/completions` (one endpoint's
OpenAI chat completions, what `akka training endpoints proxy` forwards to)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Request
from fastapi.responses import JSONResponse, StreamingResponse

from optimize.api.deps import TrainingDep
from optimize.api.status_stream import status_events
from optimize.api.routers.chat import forward
from optimize.serving import endpoints as service

router = APIRouter(prefix="/v1/training/endpoints", tags=["training"])


@router.post("")
def create(training: TrainingDep, body: Any = Body(description="{model, project?, deviceProfile?}")) -> JSONResponse:
    answer = service.create(training, body)
    return JSONResponse(answer, status_code=200 if answer["attached"] else 202)


@router.get("")
def list_endpoints(training: TrainingDep, project: str | None = None, phase: str | None = None,
                   model: str | None = None, archived: bool = False) -> dict:
    return {"endpoints": service.list_endpoints(training, project, phase, model, archived)}


@router.get("/info")
def info(training: TrainingDep) -> dict:
    return service.info(training)


@router.get("/{endpoint_id}")
def get(endpoint_id: str, training: TrainingDep) -> dict:
    return service.get(training, endpoint_id)


@router.delete("/{endpoint_id}")
def delete(endpoint_id: str, training: TrainingDep) -> dict:
    return service.delete_endpoint(training, endpoint_id)


@router.post("/{endpoint_id}/detach")
def detach(endpoint_id: str, training: TrainingDep, body: Any = Body(description="{model}")) -> dict:
    model = body.get("model") if isinstance(body, dict) else None
    if not isinstance(model, str) or not model:
        from optimize.core.errors import Invalid

        raise Invalid("detach needs model: the attached model reference to stop serving")
    return service.detach(training, endpoint_id, model)


@router.post("/{endpoint_id}/chat/completions")
async def chat(endpoint_id: str, request: Request, training: TrainingDep):
    return await forward(request, training, endpoint_id)


@router.get("/{endpoint_id}/events")
async def follow(endpoint_id: str, training: TrainingDep) -> StreamingResponse:
    """The endpoint's status now, then whenever it changes, until it answers with every model or never will."""
    return await status_events(service.get, training, endpoint_id, "endpointId")
