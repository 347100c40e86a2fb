"""Dataset analyses: `POST /v1/training/datasets/analyses`, `GET …/{analysisId}`, `GET …?dataset=REF`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from optimize.analysis import service
from optimize.api.deps import TrainingDep

router = APIRouter(prefix="/v1/training/datasets/analyses", tags=["training"])


class AnalysisRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    dataset: str = Field(description="Dataset reference NS/NAME[:vN|:ALIAS|@sha256:HEX]")
    model: str | None = Field(default=None, description="Base model: entry id, repository or unambiguous prefix "
                              "(default: the plan's baseModel)")
    plan: dict[str, Any] | None = Field(default=None, description="A run plan (kind: run) to estimate steps and time for")


@router.post("")
async def start_analysis(body: AnalysisRequest, training: TrainingDep) -> JSONResponse:
    analysis, launched = await run_in_threadpool(service.start_analysis, training, body.dataset, body.model,
                                                  body.plan)
    return JSONResponse(analysis, status_code=202 if launched else 200)


@router.get("")
def list_analyses(dataset: str, training: TrainingDep) -> dict:
    return {"analyses": service.list_analyses(training, dataset)}


@router.get("/{analysis_id}")
def get_analysis(analysis_id: str, training: TrainingDep) -> dict:
    body = service.get_analysis(training, analysis_id)
    return body
