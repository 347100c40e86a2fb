"""Evaluations: `POST /v1/training/evaluations`, `GET …[?project=&model=&phase=]`, `GET …/{id}`,
`POST …/{id}/cancel|retry`, `GET …/{id}/predictions[?limit=]` and `GET …/{id}/events` (server-sent events)."""

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
from optimize.evaluation import service
from optimize.schemas.common import event_stream
from optimize.schemas.evaluations import Evaluation, EvaluationList, EvaluationRequest, Predictions

router = APIRouter(prefix="/v1/training/evaluations", tags=["training"])
add_log_route(router, "evaluation")  # GET …/{id}/logs: the worker's log, per attempt


@router.post("", response_model=Evaluation, status_code=202, response_description="The evaluation was queued")
async def start(deployment: DeploymentDep,
                body: Annotated[Any, documented_as(EvaluationRequest), Body()]) -> Evaluation:
    # on the submissions' lane: a bundle grader's import check is user code, which the service waits for
    return await SUBMISSIONS_LANE.run(service.start, deployment, EvaluationRequest.parse(body))


@router.get("", response_model=EvaluationList)
def list_evaluations(deployment: DeploymentDep, project: str | None = None, model: str | None = None,
                     phase: str | None = None, archived: bool = False) -> EvaluationList:
    return EvaluationList(evaluations=service.list_evaluations(deployment, project, model, phase, archived))


@router.get("/{evaluation_id}", response_model=Evaluation)
def get(evaluation_id: str, deployment: DeploymentDep) -> Evaluation:
    return service.get(deployment, evaluation_id)


@router.post("/{evaluation_id}/cancel", response_model=Evaluation)
def cancel(evaluation_id: str, deployment: DeploymentDep) -> Evaluation:
    return service.cancel(deployment, evaluation_id)


@router.post("/{evaluation_id}/retry", response_model=Evaluation, status_code=202,
             response_description="The evaluation was queued again")
def retry(evaluation_id: str, deployment: DeploymentDep) -> Evaluation:
    return service.retry(deployment, evaluation_id)


@router.get("/{evaluation_id}/predictions", response_model=Predictions)
def predictions(evaluation_id: str, deployment: DeploymentDep, limit: Limit = None) -> Predictions:
    """The evaluation's answers by line; with `limit`, only the first `limit`."""
    return service.predictions(deployment, evaluation_id, limit)


@router.get("/{evaluation_id}/events", response_class=StreamingResponse,
            responses=event_stream("Server-sent events: the evaluation's status (as GET …/evaluations/{id} answers "
                                   "it) now and whenever it changes, until it has ended"))
async def follow(evaluation_id: str, deployment: DeploymentDep, request: Request) -> StreamingResponse:
    """The evaluation's status now, then whenever it changes, until it has ended."""
    return await status_events(request, service.get, deployment, evaluation_id, "evaluationId", "evaluation")
