"""Snapshots: `GET /v1/training/snapshots/{id}`, `POST …/{id}/register`, `POST …/{id}/pin|unpin`."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body

from optimize.api.bodies import documented_as
from optimize.api.deps import DeploymentDep
from optimize.core.errors import Invalid
from optimize.schemas.runs import PinRequest, RegisteredSnapshot, RegisterSnapshotRequest, Snapshot, SnapshotDetail
from optimize.training.server import snapshots

router = APIRouter(prefix="/v1/training/snapshots", tags=["training"])


@router.get("/{snapshot_id}", response_model=SnapshotDetail)
def get_snapshot(snapshot_id: str, deployment: DeploymentDep) -> dict:
    return snapshots.get_snapshot(deployment, snapshot_id)


@router.post("/{snapshot_id}/register", response_model=RegisteredSnapshot)
def register_snapshot(snapshot_id: str, deployment: DeploymentDep,
                      body: Annotated[Any, documented_as(RegisterSnapshotRequest), Body()] = None) -> dict:
    return snapshots.register(deployment, snapshot_id, _field(body, "name", str))


@router.post("/{snapshot_id}/pin", response_model=Snapshot)
def pin_snapshot(snapshot_id: str, deployment: DeploymentDep,
                 body: Annotated[Any, documented_as(PinRequest), Body()] = None) -> dict:
    return snapshots.pin(deployment, snapshot_id, _field(body, "kinds", list), pinned=True)


@router.post("/{snapshot_id}/unpin", response_model=Snapshot)
def unpin_snapshot(snapshot_id: str, deployment: DeploymentDep,
                   body: Annotated[Any, documented_as(PinRequest), Body()] = None) -> dict:
    return snapshots.pin(deployment, snapshot_id, _field(body, "kinds", list), pinned=False)


def _field(body: Any, name: str, kind: type) -> Any:
    value = body.get(name) if isinstance(body, dict) else None
    if value is not None and not isinstance(value, kind):
        raise Invalid(f"{name} must be a {'string' if kind is str else 'list'}")
    if kind is list and value is not None and not all(isinstance(item, str) for item in value):
        raise Invalid(f"{name} must be a list of kind names", hint=f"kinds: {', '.join(snapshots.KINDS)}")
    return value
