"""Pipelines: `POST /v1/training/pipelines[?dryRun=true&showResolved=true]`, `GET …[?project=&phase=]`,
`GET …/{id}`, `POST …/{id}/cancel|resume` and `GET …/{id}/events` (server-sent events)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse

from optimize.api.bodies import documented_as
from optimize.api.deps import DeploymentDep
from optimize.api.lanes import SUBMISSIONS_LANE
from optimize.api.status_stream import status_events
from optimize.pipelines import service
from optimize.schemas.common import event_stream
from optimize.schemas.pipelines import Pipeline, PipelineDryRun, PipelineList, PipelinePlan

router = APIRouter(prefix="/v1/training/pipelines", tags=["training"])


@router.post("", response_model=Pipeline | PipelineDryRun, status_code=202,
             response_description="The pipeline was accepted (a dry run: what was checked, nothing started)")
async def start(deployment: DeploymentDep, body: Annotated[Any, documented_as(PipelinePlan), Body()],
                dry_run: Annotated[bool, Query(alias="dryRun")] = False,
                show_resolved: Annotated[bool, Query(alias="showResolved")] = False) -> Any:
    # on the submissions' lane: a train stage's dry run may run user code (a rule bundle's check)
    answer = await SUBMISSIONS_LANE.run(service.start, deployment, body, dry_run, show_resolved)
    return JSONResponse(answer.model_dump(mode="json", by_alias=True), status_code=200 if dry_run else 202)


@router.get("", response_model=PipelineList)
def list_pipelines(deployment: DeploymentDep, project: str | None = None, phase: str | None = None) -> PipelineList:
    return service.list_pipelines(deployment, project, phase)


@router.get("/{pipeline_id}", response_model=Pipeline)
def get(pipeline_id: str, deployment: DeploymentDep) -> Pipeline:
    return service.get(deployment, pipeline_id)


@router.post("/{pipeline_id}/cancel", response_model=Pipeline)
def cancel(pipeline_id: str, deployment: DeploymentDep) -> Pipeline:
    return service.cancel(deployment, pipeline_id)


@router.post("/{pipeline_id}/resume", response_model=Pipeline)
def resume(pipeline_id: str, deployment: DeploymentDep) -> Pipeline:
    return service.resume(deployment, pipeline_id)


@router.get("/{pipeline_id}/events", response_class=StreamingResponse,
            responses=event_stream("Server-sent events: the pipeline's status (as GET …/pipelines/{id} answers it) now "
                                   "and whenever it or a stage's job changes, until it has ended"))
async def follow(pipeline_id: str, deployment: DeploymentDep, request: Request) -> StreamingResponse:
    return await status_events(request, service.get, deployment, pipeline_id, "pipelineId", "pipeline")
