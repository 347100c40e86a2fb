"""`GET /metrics`: the deployment's jobs, devices and endpoints' load in Prometheus' text format
(`api.prometheus`)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import PlainTextResponse

from optimize.api.deps import DeploymentDep
from optimize.api.prometheus import metrics_text
from optimize.core.access import current
from optimize.core.errors import Forbidden

router = APIRouter(tags=["server"])
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@router.get("/metrics", response_class=PlainTextResponse,
            responses={200: {"description": "Prometheus text format 0.0.4",
                             "content": {"text/plain": {"schema": {
                                 "type": "string", "description": "Jobs by kind and phase, devices by pool and "
                                                                  "state, and each READY endpoint's load"}}}}})
async def metrics(deployment: DeploymentDep) -> PlainTextResponse:
    if current() is not None:
        raise Forbidden("a token limited to projects or namespaces cannot read the deployment's metrics, which "
                        "count every project's jobs", hint="scrape with a token that has no limits")
    return PlainTextResponse(await run_in_threadpool(metrics_text, deployment), media_type=CONTENT_TYPE)
