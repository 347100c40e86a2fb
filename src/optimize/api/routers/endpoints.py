"""Endpoints: `POST /v1/training/endpoints`, `GET …[?project=&phase=&model=]`, `GET …/info`, `GET …/{id}`,
`DELETE …/{id}`, `POST …/{id}/detach`, `POST …/{id}/disable` and `…/enable` (`{model}`: refused 409 through the
server, or answering again), `GET …/{id}/events` (server-sent events) and `POST …/{id}/chat/completions` (one
endpoint's OpenAI chat completions, what `akka training endpoints proxy` forwards to)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request
from fastapi.responses import JSONResponse, StreamingResponse

from optimize.api.bodies import documented_as
from optimize.api.deps import DeploymentDep
from optimize.api.job_logs import add_log_route
from optimize.api.routers.chat import CHAT_RESPONSES, TEXT_RESPONSES, chat_request_body, forward
from optimize.api.status_stream import status_events
from optimize.schemas.common import event_stream
from optimize.schemas.endpoints import (
    DetachRequest,
    EnableRequest,
    Endpoint,
    EndpointCreated,
    EndpointList,
    EndpointRequest,
    EndpointsInfo,
)
from optimize.serving import endpoints as service

router = APIRouter(prefix="/v1/training/endpoints", tags=["training"])
add_log_route(router, "endpoint")  # GET …/{id}/logs: the worker's log, per attempt


@router.post("", response_model=EndpointCreated, status_code=202,
             response_description="A new endpoint waits for capacity",
             responses={200: {"model": EndpointCreated, "description": "The model was attached to an endpoint already "
                                                                       "serving its base model"}})
def create(deployment: DeploymentDep, body: Annotated[Any, documented_as(EndpointRequest), Body()]) -> JSONResponse:
    answer = service.create(deployment, EndpointRequest.parse(body))
    return JSONResponse(answer.model_dump(mode="json", by_alias=True), status_code=200 if answer.attached else 202)


@router.get("", response_model=EndpointList)
def list_endpoints(deployment: DeploymentDep, project: str | None = None, phase: str | None = None,
                   model: str | None = None, archived: bool = False) -> EndpointList:
    return EndpointList(endpoints=service.list_endpoints(deployment, project, phase, model, archived))


@router.get("/info", response_model=EndpointsInfo)
def info(deployment: DeploymentDep) -> EndpointsInfo:
    return service.info(deployment)


@router.get("/{endpoint_id}", response_model=Endpoint)
def get(endpoint_id: str, deployment: DeploymentDep) -> Endpoint:
    return service.get(deployment, endpoint_id)


@router.delete("/{endpoint_id}", response_model=Endpoint)
def delete(endpoint_id: str, deployment: DeploymentDep) -> Endpoint:
    return service.delete_endpoint(deployment, endpoint_id)


@router.post("/{endpoint_id}/detach", response_model=Endpoint)
def detach(endpoint_id: str, deployment: DeploymentDep,
           body: Annotated[Any, documented_as(DetachRequest), Body()]) -> Endpoint:
    return service.detach(deployment, endpoint_id, DetachRequest.parse(body).model)


@router.post("/{endpoint_id}/disable", response_model=Endpoint)
def disable(endpoint_id: str, deployment: DeploymentDep, body: Annotated[Any, documented_as(EnableRequest), Body()]
            ) -> Endpoint:
    """Requests for the model through the server are answered 409 until it is enabled; the endpoint keeps its
    device and the model stays loaded."""
    return service.set_enabled(deployment, endpoint_id, EnableRequest.parse(body, verb="disable").model, enabled=False)


@router.post("/{endpoint_id}/enable", response_model=Endpoint)
def enable(endpoint_id: str, deployment: DeploymentDep, body: Annotated[Any, documented_as(EnableRequest), Body()]
           ) -> Endpoint:
    """The model answers through the server again."""
    return service.set_enabled(deployment, endpoint_id, EnableRequest.parse(body, verb="enable").model, enabled=True)


@router.post("/{endpoint_id}/chat/completions", responses=CHAT_RESPONSES,
             openapi_extra=chat_request_body())
async def chat(endpoint_id: str, request: Request, deployment: DeploymentDep):
    return await forward(request, deployment, endpoint_id)


@router.post("/{endpoint_id}/completions", responses=TEXT_RESPONSES)
async def completions(endpoint_id: str, request: Request, deployment: DeploymentDep):
    """`POST /v1/completions` at this endpoint: the model may be left out (the endpoint's own answers)."""
    return await forward(request, deployment, endpoint_id, "completions")


@router.get("/{endpoint_id}/events", response_class=StreamingResponse,
            responses=event_stream("Server-sent events: the endpoint's status (as GET …/endpoints/{id} answers it) "
                                   "now and whenever it changes, until it answers with every model or never will"))
async def follow(endpoint_id: str, deployment: DeploymentDep, request: Request) -> StreamingResponse:
    """The endpoint's status now, then whenever it changes, until it answers with every model or never will."""
    return await status_events(request, service.get, deployment, endpoint_id, "endpointId", "endpoint")
