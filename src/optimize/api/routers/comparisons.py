"""Comparisons: `POST /v1/training/comparisons`, `GET …[?project=&phase=]`, `GET …/{id}`, `POST …/{id}/cancel`,
`GET …/{id}/rows/{line}` (every model's answer to one row) and `GET …/{id}/events` (server-sent events)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request
from fastapi.responses import StreamingResponse

from optimize.api.bodies import documented_as
from optimize.api.deps import DeploymentDep
from optimize.api.lanes import SUBMISSIONS_LANE
from optimize.api.status_stream import status_events
from optimize.comparisons import service
from optimize.schemas.common import event_stream
from optimize.schemas.comparisons import Comparison, ComparisonList, ComparisonRequest, ComparisonRow

router = APIRouter(prefix="/v1/training/comparisons", tags=["training"])


@router.post("", response_model=Comparison, status_code=202,
             response_description="The comparison was created; its evaluations are queued (or reused)")
async def create(deployment: DeploymentDep,
                 body: Annotated[Any, documented_as(ComparisonRequest), Body()]) -> Comparison:
    # on the submissions' lane: a bundle grader's import check is user code, which the service waits for
    return await SUBMISSIONS_LANE.run(service.create, deployment, ComparisonRequest.parse(body))


@router.get("", response_model=ComparisonList)
def list_comparisons(deployment: DeploymentDep, project: str | None = None, phase: str | None = None
                     ) -> ComparisonList:
    return service.list_comparisons(deployment, project, phase)


@router.get("/{comparison_id}", response_model=Comparison)
def get(comparison_id: str, deployment: DeploymentDep) -> Comparison:
    return service.get(deployment, comparison_id)


@router.post("/{comparison_id}/cancel", response_model=Comparison)
def cancel(comparison_id: str, deployment: DeploymentDep) -> Comparison:
    return service.cancel(deployment, comparison_id)


@router.get("/{comparison_id}/rows/{line}", response_model=ComparisonRow)
def row(comparison_id: str, line: int, deployment: DeploymentDep) -> ComparisonRow:
    """Every compared model's answer to one line of the dataset, side by side."""
    return service.row_answers(deployment, comparison_id, line)


@router.get("/{comparison_id}/events", response_class=StreamingResponse,
            responses=event_stream("Server-sent events: the comparison's status (as GET …/comparisons/{id} answers "
                                   "it) now and whenever it changes, until it has ended"))
async def follow(comparison_id: str, deployment: DeploymentDep, request: Request) -> StreamingResponse:
    """The comparison's status now, then whenever it changes, until it has ended."""
    return await status_events(request, service.get, deployment, comparison_id, "comparisonId", "comparison")
