"""OpenAI's fine-tuning routes: `/v1/files` (upload with purpose fine-tune, list, retrieve) and
`/v1/fine_tuning/jobs` (create, list, retrieve, cancel, pause, resume, events, checkpoints), in OpenAI's shapes, over
the project an `OpenAI-Project` header names (else the deployment's fine-tuning project). Reads need a reader's
token, uploads and jobs a trainer's; refusals carry OpenAI's error object naming the parameter."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request
from fastapi.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from optimize.api.bodies import documented_as, required_body
from optimize.api.deps import DeploymentDep, RegistryDep
from optimize.api.lanes import SUBMISSIONS_LANE
from optimize.api.params import Limit
from optimize.api.text_guard import json_of
from optimize.core.errors import Invalid, TooLarge
from optimize.fine_tuning import files, jobs
from optimize.fine_tuning.workspace import ensure_project, project_named
from optimize.schemas.fine_tuning import (
    FileList,
    FileObject,
    FineTuningJob,
    FineTuningJobList,
    FineTuningJobRequest,
    JobCheckpointList,
    JobEventList,
)

router = APIRouter(prefix="/v1", tags=["fine-tuning"])
PROJECT_HEADER = "openai-project"
After = Annotated[str | None, Query(max_length=200, description="The id of the last item of the page before")]
# `?limit=` is the rule every list route has (api/params.py); left out, a page is as long as OpenAI's
JOBS_PAGE, EVENTS_PAGE, CHECKPOINTS_PAGE, FILES_PAGE = 20, 20, 10, 10000
_CHUNK = 1024 * 1024


def _project(deployment, request: Request) -> str:
    return project_named(deployment, request.headers.get(PROJECT_HEADER))


@router.post("/files", response_model=FileObject, openapi_extra={"requestBody": {"required": True, "content": {
    "multipart/form-data": {"schema": {
        "type": "object", "description": "A form of two fields", "required": ["file", "purpose"], "properties": {
        "file": {"type": "string", "format": "binary", "description": "Rows in JSONL, a JSON array or Parquet"},
        "purpose": {"type": "string", "description": "fine-tune"}}}}}}})
async def upload_file(request: Request, deployment: DeploymentDep, registry: RegistryDep) -> FileObject:
    """Register a file's rows (the registry's own, or OpenAI's chat or preference rows) as a version of the dataset
    named after the file, in the project's namespace."""
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise Invalid("a file is uploaded as multipart/form-data with the fields file and purpose", param="file")
    most = registry.limits.max_shards * registry.limits.max_shard_bytes
    async with request.form(max_files=1, max_fields=8) as form:
        purpose, upload = form.get("purpose"), form.get("file")
        if not isinstance(purpose, str):
            raise Invalid("purpose is required: fine-tune", param="purpose")
        if not isinstance(upload, UploadFile):
            raise Invalid("file is required: the file of rows, as a multipart file field", param="file")
        with tempfile.TemporaryDirectory(prefix="optimize-upload-") as folder:
            path = Path(folder) / "upload"
            size = await run_in_threadpool(_copy, upload, path, most)
            if size > most:
                raise TooLarge(f"the file is over {most} bytes, the most one dataset version holds",
                               hint="split it, or register it with akka registry datasets register", param="file")
            filename = upload.filename or "file"
            rows = await run_in_threadpool(files.read_upload, path, filename, purpose, Path(folder))
            project = await run_in_threadpool(_project, deployment, request)
            await run_in_threadpool(ensure_project, deployment, project)  # a file that passed creates it
            return await run_in_threadpool(files.register, registry, project, filename, rows)


def _copy(upload: UploadFile, path: Path, most: int) -> int:
    """The upload's bytes into `path`, stopping past `most` (returns the bytes copied)."""
    size = 0
    with path.open("wb") as out:
        while size <= most and (chunk := upload.file.read(_CHUNK)):
            out.write(chunk)
            size += len(chunk)
    return size


@router.get("/files", response_model=FileList)
def list_files(request: Request, deployment: DeploymentDep, registry: RegistryDep, after: After = None,
               limit: Limit = None) -> FileList:
    """The project's files (every dataset version of its namespace), newest first; 10000 a page by default."""
    return files.list_files(registry, _project(deployment, request), after, limit or FILES_PAGE)


@router.get("/files/{file_id}", response_model=FileObject)
def get_file(file_id: str, request: Request, deployment: DeploymentDep, registry: RegistryDep) -> FileObject:
    return files.get_file(registry, _project(deployment, request), file_id)


@router.delete("/files/{file_id}", response_model=FileObject)
def delete_file(file_id: str, request: Request, deployment: DeploymentDep, registry: RegistryDep) -> FileObject:
    """Refused: a file is a registry version, which runs and models name by its digest."""
    files.get_file(registry, _project(deployment, request), file_id)  # an unknown file is 404 first
    raise Invalid(f"file {file_id} is a dataset version of the registry, which is kept: runs and models name it",
                  hint="archive the namespace with: akka registry namespaces archive NAME", param="file_id")


@router.post("/fine_tuning/jobs", response_model=FineTuningJob, openapi_extra=required_body())
async def create_job(request: Request, deployment: DeploymentDep, body: Annotated[
        Any, documented_as(FineTuningJobRequest), Body(description="OpenAI's fine-tuning job")] = None
                     ) -> FineTuningJob:
    """An sft (method supervised) or dpo run of the base model over the file's rows."""
    if isinstance(body, bytes):  # JSON sent under another Content-Type (`curl -d` sends a form's), read all the same
        body = json_of(body, "send OpenAI's fine-tuning job: an object with model and training_file")
    asked = FineTuningJobRequest.parse(body)
    project = await run_in_threadpool(_project, deployment, request)
    return await SUBMISSIONS_LANE.run(jobs.create, deployment, project, asked)


@router.get("/fine_tuning/jobs", response_model=FineTuningJobList)
def list_jobs(request: Request, deployment: DeploymentDep, after: After = None, limit: Limit = None
              ) -> FineTuningJobList:
    """Every run of the project, newest first; 20 a page by default."""
    return jobs.list_jobs(deployment, _project(deployment, request), after, limit or JOBS_PAGE)


@router.get("/fine_tuning/jobs/{job_id}", response_model=FineTuningJob)
def get_job(job_id: str, request: Request, deployment: DeploymentDep) -> FineTuningJob:
    return jobs.get(deployment, _project(deployment, request), job_id)


@router.post("/fine_tuning/jobs/{job_id}/cancel", response_model=FineTuningJob)
def cancel_job(job_id: str, request: Request, deployment: DeploymentDep) -> FineTuningJob:
    return jobs.cancel(deployment, _project(deployment, request), job_id)


@router.post("/fine_tuning/jobs/{job_id}/pause", response_model=FineTuningJob)
def pause_job(job_id: str, request: Request, deployment: DeploymentDep) -> FineTuningJob:
    """Paused at the run's next save, holding its training state."""
    return jobs.pause(deployment, _project(deployment, request), job_id)


@router.post("/fine_tuning/jobs/{job_id}/resume", response_model=FineTuningJob)
def resume_job(job_id: str, request: Request, deployment: DeploymentDep) -> FineTuningJob:
    return jobs.resume(deployment, _project(deployment, request), job_id)


@router.get("/fine_tuning/jobs/{job_id}/events", response_model=JobEventList)
def job_events(job_id: str, request: Request, deployment: DeploymentDep, after: After = None,
               limit: Limit = None) -> JobEventList:
    """The run's phases, saves and each logged step's figures, newest first; 20 a page by default."""
    return jobs.events(deployment, _project(deployment, request), job_id, after, limit or EVENTS_PAGE)


@router.get("/fine_tuning/jobs/{job_id}/checkpoints", response_model=JobCheckpointList)
def job_checkpoints(job_id: str, request: Request, deployment: DeploymentDep, after: After = None,
                    limit: Limit = None) -> JobCheckpointList:
    """The run's saves that hold adapter weights, newest first; 10 a page by default."""
    return jobs.checkpoints(deployment, _project(deployment, request), job_id, after, limit or CHECKPOINTS_PAGE)

