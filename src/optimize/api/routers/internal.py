"""The one route family workers call, under `/v1/internal/jobs/{kind}/{id}`: the job's spec (GET), its actions
(POST …/heartbeat, …/progress, …/metrics, …/rollouts, …/snapshots, …/predictions, …/result: whichever its kind
declares), and the blobs it reads and writes (…/blobs/{sha256}). Every call carries the lease token
(`X-Lease-Token`) and is fenced by it: a worker that no longer holds its job is answered 409 `lease_lost`. A
worker reads only the blobs its job reads (its kind's `readable_blobs`: the inputs its spec names, and the files of
the manifests among them); any other digest is answered 403 `forbidden`, so one job's lease never reads another
job's data. The routes run on the workers' own threads (`api.lanes`), never queued behind users' requests."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, RedirectResponse, Response, StreamingResponse

from optimize.api.deps import DeploymentDep, RegistryDep
from optimize.api.lanes import LaneRoute
from optimize.core.errors import Forbidden, Invalid, NotFound
from optimize.jobs import registry as job_kinds
from optimize.jobs.leases import fence

router = APIRouter(prefix="/v1/internal/jobs", tags=["internal"], include_in_schema=False, route_class=LaneRoute)
Lease = Annotated[str, Header(alias="X-Lease-Token")]


def _kind(name: str):
    if name not in job_kinds.KINDS:
        raise NotFound(f"{name!r} is not a job kind", hint="kinds: " + ", ".join(job_kinds.KINDS))
    return job_kinds.kind(name)


def _fenced(deployment, kind_name: str, job_id: str, token: str) -> None:
    kind = _kind(kind_name)
    with deployment.store.transaction() as session:
        fence(session, kind.lifecycle, job_id, token)


def _fenced_reader(deployment, kind_name: str, job_id: str, token: str, sha256: str) -> None:
    """Fenced, and refused (403) a blob the job does not read."""
    kind = _kind(kind_name)
    with deployment.store.transaction() as session:
        row, _lease = fence(session, kind.lifecycle, job_id, token)
        readable = kind.readable_blobs(deployment, session, row)
    if not readable.allows(sha256, deployment.blobs):
        raise Forbidden(f"{kind_name} {job_id} does not read blob {sha256[:12]}…",
                        hint="a worker reads only its own job's inputs (the blobs its spec names)")


@router.get("/{kind}/{job_id}")
def job_spec(kind: str, job_id: str, deployment: DeploymentDep, lease: Lease) -> dict:
    return _kind(kind).worker_spec(deployment, job_id, lease, {})


@router.get("/{kind}/{job_id}/blobs/{sha256}")
def get_blob(kind: str, job_id: str, sha256: str, deployment: DeploymentDep, registry: RegistryDep,
             lease: Lease) -> Response:
    """The blob's bytes, only as far as they match its name: a corrupt copy is quarantined and answered 410
    `corrupt` (or, when it changed after the check, cut short before its last chunk). Only a blob the job reads
    (403 `forbidden` otherwise). On a store in a bucket (S3): a 307 to a short-lived presigned GET, so that the
    worker reads the bucket itself (and hashes what it reads)."""
    registry.blobs.path_for(sha256)  # refuses a malformed digest
    _fenced_reader(deployment, kind, job_id, lease, sha256)
    url = registry.blobs.download_url(sha256)
    if url is not None:
        return RedirectResponse(url, status_code=307)
    size, chunks = registry.blobs.stream(sha256)
    return StreamingResponse(chunks, media_type="application/octet-stream", headers={"Content-Length": str(size)})


@router.put("/{kind}/{job_id}/blobs/{sha256}")
async def put_blob(kind: str, job_id: str, sha256: str, request: Request, deployment: DeploymentDep,
                   registry: RegistryDep, lease: Lease) -> JSONResponse:
    """A worker's output (a save's files, an analysis' per-row lengths), stored under its digest."""
    registry.blobs.path_for(sha256)  # refuses a malformed digest before reading anything
    await run_in_threadpool(_fenced, deployment, kind, job_id, lease)
    writer = registry.blobs.writer()
    try:
        async for chunk in request.stream():
            await run_in_threadpool(writer.write, chunk)
        await run_in_threadpool(writer.commit, sha256)
    except BaseException:
        writer.abort()
        raise
    return JSONResponse({"sha256": sha256, "bytes": writer.size}, status_code=201)


@router.post("/{kind}/{job_id}/blobs/{sha256}/target")
def upload_target(kind: str, job_id: str, sha256: str, deployment: DeploymentDep, registry: RegistryDep, lease: Lease,
                  body: Any = Body(default=None)) -> dict[str, Any]:
    """Where the worker writes a blob of its output itself: on a store in a bucket (S3), a short-lived presigned
    PUT with the checksum of its name signed in (`url`, `headers`), then `POST …/blobs/{sha256}/written`; `url`
    null: PUT it to the server."""
    registry.blobs.path_for(sha256)
    _fenced(deployment, kind, job_id, lease)
    size = (body or {}).get("bytes") if isinstance(body, dict) else None
    if type(size) is not int or size < 0:
        raise Invalid("bytes must be the blob's size (an integer)")
    # direct: whether this deployment's workers write blobs themselves at all (then a too-large one still not)
    return {"url": None, "direct": registry.blobs.direct_writes} | (registry.blobs.upload_target(sha256, size) or {})


@router.post("/{kind}/{job_id}/blobs/{sha256}/written", status_code=201)
def written(kind: str, job_id: str, sha256: str, deployment: DeploymentDep, registry: RegistryDep,
            lease: Lease) -> dict[str, Any]:
    """A blob the worker wrote to the bucket itself, accepted once the bucket holds its name's bytes."""
    registry.blobs.path_for(sha256)
    _fenced(deployment, kind, job_id, lease)
    return {"sha256": sha256, "bytes": registry.blobs.accept_upload(sha256)}


@router.post("/{kind}/{job_id}/{action}")
def job_action(kind: str, job_id: str, action: str, deployment: DeploymentDep, lease: Lease,
               body: Any = Body(default=None)) -> Any:
    handler = _kind(kind).handler(action)
    if handler is None or action == "spec":
        raise NotFound(f"a {kind} worker has no action {action!r}")
    return handler(deployment, job_id, lease, body if isinstance(body, dict) else {})
