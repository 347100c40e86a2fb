"""Routes only workers call (analyses, runs, evaluations and endpoints), under `/v1/internal/`: each write
carries the attempt's lease token, and a worker that no longer holds its attempt is answered 409 `lease_lost`."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, JSONResponse

from optimize.analysis import service
from optimize.evaluation import service as evaluations
from optimize.serving import endpoints
from optimize.training import attempts
from optimize.api.deps import RegistryDep, TrainingDep
from optimize.core.errors import NotFound

router = APIRouter(prefix="/v1/internal", tags=["internal"], include_in_schema=False)
Lease = Annotated[str, Header(alias="X-Lease-Token")]


@router.get("/blobs/{sha256}")
def get_blob(sha256: str, registry: RegistryDep) -> FileResponse:
    path = registry.blobs.path_for(sha256)
    if not path.is_file():
        raise NotFound(f"blob sha256:{sha256} is not held")
    return FileResponse(path, media_type="application/octet-stream")


@router.put("/blobs/{sha256}")
async def put_blob(sha256: str, request: Request, registry: RegistryDep, lease: Lease) -> JSONResponse:
    """A worker's output (e.g. an analysis' per-row lengths), stored under its digest."""
    registry.blobs.path_for(sha256)  # refuses a malformed digest before reading anything
    writer = registry.blobs.writer()
    try:
        async for chunk in request.stream():
            await run_in_threadpool(writer.write, chunk)
        await run_in_threadpool(writer.commit, sha256)
    except BaseException:
        writer.abort()
        raise
    return JSONResponse({"sha256": sha256, "bytes": writer.size}, status_code=201)


@router.get("/analyses/{analysis_id}")
def analysis_spec(analysis_id: str, training: TrainingDep, lease: Lease) -> dict:
    return service.job_spec(training, analysis_id, lease)


@router.post("/analyses/{analysis_id}/running")
def analysis_running(analysis_id: str, training: TrainingDep, lease: Lease) -> dict:
    service.mark_running(training, analysis_id, lease)
    return {"ok": True}


@router.post("/analyses/{analysis_id}/result")
def analysis_result(analysis_id: str, body: dict[str, Any], training: TrainingDep, lease: Lease) -> dict:
    service.finish(training, analysis_id, lease, body)
    if training.scheduler is not None:
        training.scheduler.wake()  # runs may be waiting for this analysis before they claim devices
    return {"ok": True}


# --- run workers ----------------------------------------------------------------------------------------------


@router.get("/runs/{run_id}")
def run_spec(run_id: str, training: TrainingDep, lease: Lease) -> dict:
    return attempts.job_spec(training, run_id, lease)


@router.post("/runs/{run_id}/heartbeat")
def run_heartbeat(run_id: str, training: TrainingDep, lease: Lease) -> dict:
    return attempts.heartbeat(training, run_id, lease)


@router.post("/runs/{run_id}/progress")
def run_progress(run_id: str, body: dict[str, Any], training: TrainingDep, lease: Lease) -> dict:
    return attempts.report_progress(training, run_id, lease, body)


@router.post("/runs/{run_id}/metrics")
def run_metrics(run_id: str, body: dict[str, Any], training: TrainingDep, lease: Lease) -> dict:
    return attempts.report_metrics(training, run_id, lease, body.get("items") or [])


@router.post("/runs/{run_id}/snapshots")
def run_snapshot(run_id: str, body: dict[str, Any], training: TrainingDep, lease: Lease) -> dict:
    return attempts.commit_snapshot(training, run_id, lease, body)


@router.post("/runs/{run_id}/result")
def run_result(run_id: str, body: dict[str, Any], training: TrainingDep, lease: Lease) -> dict:
    return attempts.finish(training, run_id, lease, body)


# --- evaluation workers ---------------------------------------------------------------------------------------


@router.get("/evaluations/{evaluation_id}")
def evaluation_spec(evaluation_id: str, training: TrainingDep, lease: Lease) -> dict:
    return evaluations.job_spec(training, evaluation_id, lease)


@router.post("/evaluations/{evaluation_id}/heartbeat")
def evaluation_heartbeat(evaluation_id: str, training: TrainingDep, lease: Lease) -> dict:
    return evaluations.heartbeat(training, evaluation_id, lease)


@router.post("/evaluations/{evaluation_id}/predictions")
def evaluation_predictions(evaluation_id: str, body: dict[str, Any], training: TrainingDep, lease: Lease) -> dict:
    return evaluations.add_predictions(training, evaluation_id, lease, body.get("items") or [])


@router.post("/evaluations/{evaluation_id}/result")
def evaluation_result(evaluation_id: str, body: dict[str, Any], training: TrainingDep, lease: Lease) -> dict:
    answer = evaluations.finish(training, evaluation_id, lease, body)
    if training.scheduler is not None:
        training.scheduler.wake()  # its device is free for the next job
    return answer



# --- endpoint workers -----------------------------------------------------------------------------------------


@router.get("/endpoints/{endpoint_id}")
def endpoint_spec(endpoint_id: str, training: TrainingDep, lease: Lease) -> dict:
    return endpoints.job_spec(training, endpoint_id, lease)


@router.post("/endpoints/{endpoint_id}/heartbeat")
def endpoint_heartbeat(endpoint_id: str, body: dict[str, Any], training: TrainingDep, lease: Lease) -> dict:
    return endpoints.heartbeat(training, endpoint_id, lease, body)


@router.post("/endpoints/{endpoint_id}/result")
def endpoint_result(endpoint_id: str, body: dict[str, Any], training: TrainingDep, lease: Lease) -> dict:
    answer = endpoints.finish(training, endpoint_id, lease, body)
    if training.scheduler is not None:
        training.scheduler.wake()  # its device is free for the next job
    return answer
