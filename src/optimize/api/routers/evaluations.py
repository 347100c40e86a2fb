"""Evaluations: `POST /v1/training/evaluations`, `GET …[?project=&model=&phase=]`, `GET …/{id}`,
`POST …/{id}/cancel|retry`, `GET …/{id}/predictions[?limit=]` and `GET …/{id}/events` (server-sent events)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body
from fastapi.responses import JSONResponse, StreamingResponse

from optimize.api.deps import TrainingDep
from optimize.api.status_stream import status_events
from optimize.evaluation import service

router = APIRouter(prefix="/v1/training/evaluations", tags=["training"])


@router.post("")
def start(training: TrainingDep, body: Any = Body(description="{model, dataset, grader?, project?}")) -> JSONResponse:
    return JSONResponse(service.start(training, body), status_code=202)


@router.get("")
def list_evaluations(training: TrainingDep, project: str | None = None, model: str | None = None,
                     phase: str | None = None, archived: bool = False) -> dict:
    return {"evaluations": service.list_evaluations(training, project, model, phase, archived)}


@router.get("/{evaluation_id}")
def get(evaluation_id: str, training: TrainingDep) -> dict:
    return service.get(training, evaluation_id)


@router.post("/{evaluation_id}/cancel")
def cancel(evaluation_id: str, training: TrainingDep) -> dict:
    return service.cancel(training, evaluation_id)


@router.post("/{evaluation_id}/retry")
def retry(evaluation_id: str, training: TrainingDep) -> JSONResponse:
    return JSONResponse(service.retry(training, evaluation_id), status_code=202)


@router.get("/{evaluation_id}/predictions")
def predictions(evaluation_id: str, training: TrainingDep, limit: int | None = None) -> dict:
    return service.predictions(training, evaluation_id, limit)


@router.get("/{evaluation_id}/events")
async def follow(evaluation_id: str, training: TrainingDep) -> StreamingResponse:
    """The evaluation's status now, then whenever it changes, until it has ended."""
    return await status_events(service.get, training, evaluation_id, "evaluationId")
