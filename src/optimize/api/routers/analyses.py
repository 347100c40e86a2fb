"""Dataset analyses: `POST /v1/training/datasets/analyses`, `GET …/{analysisId}`, `GET …?dataset=REF`."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from optimize.analysis import service
from optimize.api.deps import TrainingDep
from optimize.schemas.analyses import Analysis, AnalysisList, AnalysisRequest

router = APIRouter(prefix="/v1/training/datasets/analyses", tags=["training"])


@router.post("", response_model=Analysis, status_code=202,
             response_description="A worker was launched to analyze the examples",
             responses={200: {"model": Analysis, "description": "The analysis kept for these examples and base model "
                                                               "commit (no worker launched)"}})
async def start_analysis(body: AnalysisRequest, training: TrainingDep) -> JSONResponse:
    analysis, launched = await run_in_threadpool(service.start_analysis, training, body.dataset, body.model,
                                                  body.plan)
    return JSONResponse(analysis, status_code=202 if launched else 200)


@router.get("", response_model=AnalysisList)
def list_analyses(dataset: str, training: TrainingDep) -> dict:
    return {"analyses": service.list_analyses(training, dataset)}


@router.get("/{analysis_id}", response_model=Analysis)
def get_analysis(analysis_id: str, training: TrainingDep) -> dict:
    body = service.get_analysis(training, analysis_id)
    return body
