"""`GET /v1/status`: the deployment at a glance (`api.status`)."""

from __future__ import annotations

from fastapi import APIRouter

from optimize.api.deps import DeploymentDep
from optimize.api.status import status as deployment_status
from optimize.schemas.status import Status

router = APIRouter(tags=["server"])


@router.get("/v1/status", response_model=Status)
def status(deployment: DeploymentDep) -> Status:
    """Jobs by kind and phase, device pools, the endpoints serving and the work queued for devices, as the
    caller's token sees them."""
    return deployment_status(deployment)
