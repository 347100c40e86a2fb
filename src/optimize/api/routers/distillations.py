"""Distillations: `POST /v1/training/distillations`, `GET …[?project=&phase=&archived=]`, `GET …/{id}`,
`POST …/{id}/pause|resume|cancel`, `GET …/{id}/rejections[?reason=&limit=]` and `GET …/{id}/events`
(server-sent events)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request
from fastapi.responses import StreamingResponse

from optimize.api.bodies import documented_as
from optimize.api.deps import DeploymentDep
from optimize.api.job_logs import add_log_route
from optimize.api.lanes import SUBMISSIONS_LANE
from optimize.api.params import Limit
from optimize.api.status_stream import status_events
from optimize.distillation import service
from optimize.schemas.common import event_stream
from optimize.schemas.distillations import Distillation, DistillationList, DistillationRequest, Rejections

router = APIRouter(prefix="/v1/training/distillations", tags=["training"])
add_log_route(router, "distillation")  # GET …/{id}/logs: the worker's log, per attempt


@router.post("", response_model=Distillation, status_code=202, response_description="The distillation was queued")
async def create(deployment: DeploymentDep,
                 body: Annotated[Any, documented_as(DistillationRequest), Body()]) -> Distillation:
    # on the submissions' lane: an acceptance grader's bundle import check is user code, which the service waits for
    return await SUBMISSIONS_LANE.run(service.create, deployment, DistillationRequest.parse(body))


@router.get("", response_model=DistillationList)
def list_distillations(deployment: DeploymentDep, project: str | None = None, phase: str | None = None,
                       archived: bool = False) -> DistillationList:
    return DistillationList(distillations=service.list_distillations(deployment, project, phase, archived))


@router.get("/{distillation_id}", response_model=Distillation)
def get(distillation_id: str, deployment: DeploymentDep) -> Distillation:
    return service.get(deployment, distillation_id)


@router.post("/{distillation_id}/pause", response_model=Distillation)
def pause(distillation_id: str, deployment: DeploymentDep) -> Distillation:
    """Stop answering and release the device; the answers saved stay, and resume goes on from them."""
    return service.pause(deployment, distillation_id)


@router.post("/{distillation_id}/resume", response_model=Distillation, status_code=202,
             response_description="The distillation was queued again")
def resume(distillation_id: str, deployment: DeploymentDep) -> Distillation:
    return service.resume(deployment, distillation_id)


@router.post("/{distillation_id}/cancel", response_model=Distillation)
def cancel(distillation_id: str, deployment: DeploymentDep) -> Distillation:
    return service.cancel(deployment, distillation_id)


@router.get("/{distillation_id}/rejections", response_model=Rejections)
def rejections(distillation_id: str, deployment: DeploymentDep, reason: str | None = None, limit: Limit = None
               ) -> Rejections:
    """The rejected answers by decision, with their reason and output; `reason` keeps one reason's."""
    return service.rejections(deployment, distillation_id, reason, limit)


@router.get("/{distillation_id}/events", response_class=StreamingResponse,
            responses=event_stream("Server-sent events: the distillation's status (as GET …/distillations/{id} "
                                   "answers it) now and whenever it changes, until it has settled"))
async def follow(distillation_id: str, deployment: DeploymentDep, request: Request) -> StreamingResponse:
    """The distillation's status now, then whenever it changes, until it has settled."""
    return await status_events(request, service.get, deployment, distillation_id, "distillationId", "distillation")
