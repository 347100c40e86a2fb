"""Curations: `POST /v1/training/curations` (202 a new one, 200 the one its curationId already names),
`GET …[?project=&phase=&archived=]`, `GET …/{id}` (its id, a prefix of it, or its curationId),
`POST …/{id}/cancel`, `GET …/{id}/rejections[?reason=&limit=]` and `GET …/{id}/events` (server-sent events)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request
from fastapi.responses import JSONResponse, StreamingResponse

from optimize.api.bodies import documented_as
from optimize.api.deps import DeploymentDep
from optimize.api.job_logs import add_log_route
from optimize.api.params import Limit
from optimize.api.status_stream import status_events
from optimize.curation import service
from optimize.schemas.common import event_stream
from optimize.schemas.curations import Curation, CurationList, CurationRejections, CurationRequest

router = APIRouter(prefix="/v1/training/curations", tags=["training"])
add_log_route(router, "curation")  # GET …/{id}/logs: the worker's log, per attempt


@router.post("", response_model=Curation, status_code=202, response_description="The curation was queued",
             responses={200: {"model": Curation, "description": "The curation its curationId already names"}})
def apply(deployment: DeploymentDep, body: Annotated[Any, documented_as(CurationRequest), Body()]) -> JSONResponse:
    curation, created = service.apply(deployment, CurationRequest.parse(body))
    return JSONResponse(curation.model_dump(mode="json", by_alias=True), status_code=202 if created else 200)


@router.get("", response_model=CurationList)
def list_curations(deployment: DeploymentDep, project: str | None = None, phase: str | None = None,
                   archived: bool = False) -> CurationList:
    return CurationList(curations=service.list_curations(deployment, project, phase, archived))


@router.get("/{curation_id}", response_model=Curation)
def get(curation_id: str, deployment: DeploymentDep) -> Curation:
    return service.get(deployment, curation_id)


@router.post("/{curation_id}/cancel", response_model=Curation)
def cancel(curation_id: str, deployment: DeploymentDep) -> Curation:
    """Stop judging and release the device; nothing is registered."""
    return service.cancel(deployment, curation_id)


@router.get("/{curation_id}/rejections", response_model=CurationRejections)
def rejections(curation_id: str, deployment: DeploymentDep, reason: str | None = None, limit: Limit = None
               ) -> CurationRejections:
    """The rejected candidates in order, with their reason, score and the judge's reply; `reason` keeps one
    reason's."""
    return service.rejections(deployment, curation_id, reason, limit)


@router.get("/{curation_id}/events", response_class=StreamingResponse,
            responses=event_stream("Server-sent events: the curation's status (as GET …/curations/{id} answers it) "
                                   "now and whenever it changes, until it has settled"))
async def follow(curation_id: str, deployment: DeploymentDep, request: Request) -> StreamingResponse:
    """The curation's status now, then whenever it changes, until it has settled."""
    return await status_events(request, service.get, deployment, curation_id, "curationId", "curation")
