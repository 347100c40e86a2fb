"""Dataset analyses: `POST /v1/training/datasets/analyses`, `GET …/{analysisId}`, `GET …?dataset=REF`,
`GET …/{analysisId}/histogram` (its rows' lengths) and `GET …/{analysisId}/events` (server-sent events)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, StreamingResponse

from optimize.analysis import service
from optimize.api.deps import DeploymentDep
from optimize.api.job_logs import add_log_route
from optimize.api.status_stream import status_events
from optimize.schemas.analyses import Analysis, AnalysisList, AnalysisRequest, LengthHistogram
from optimize.schemas.common import event_stream

router = APIRouter(prefix="/v1/training/datasets/analyses", tags=["training"])
add_log_route(router, "analysis")  # GET …/{id}/logs: the worker's log, per attempt


@router.post("", response_model=Analysis, status_code=202,
             response_description="A worker was launched to analyze the examples",
             responses={200: {"model": Analysis, "description": "The analysis kept for these examples and base model "
                                                               "commit (no worker launched)"}})
async def start_analysis(body: AnalysisRequest, deployment: DeploymentDep) -> JSONResponse:
    analysis, launched = await run_in_threadpool(service.start_analysis, deployment, body.dataset, body.model,
                                                  body.plan)
    return JSONResponse(analysis.model_dump(mode="json", by_alias=True), status_code=202 if launched else 200)


@router.get("", response_model=AnalysisList)
def list_analyses(dataset: str, deployment: DeploymentDep) -> AnalysisList:
    return AnalysisList(analyses=service.list_analyses(deployment, dataset))


@router.get("/{analysis_id}", response_model=Analysis)
def get_analysis(analysis_id: str, deployment: DeploymentDep) -> Analysis:
    return service.get_analysis(deployment, analysis_id)


@router.get("/{analysis_id}/histogram", response_model=LengthHistogram)
def length_histogram(analysis_id: str, deployment: DeploymentDep,
                     bins: Annotated[int, Query(ge=1, le=200, description="How many equal-width bins: 1 to 200")] = 40
                     ) -> LengthHistogram:
    """The rows' token lengths in equal-width bins, with the rows over each common maxSeqLength limit; refused 409
    until the analysis is done."""
    return service.length_histogram(deployment, analysis_id, bins)


@router.get("/{analysis_id}/events", response_class=StreamingResponse,
            responses=event_stream("Server-sent events: the analysis' status (as GET …/analyses/{id} answers it) now "
                                   "and after each change, until it is done or failed"))
async def follow(analysis_id: str, deployment: DeploymentDep, request: Request) -> StreamingResponse:
    return await status_events(request, service.get_analysis, deployment, analysis_id, "analysisId", "analysis")
