"""Snapshots: `GET /v1/training/snapshots/{id}`, `POST …/{id}/register`, `POST …/{id}/pin|unpin`."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body

from optimize.api.bodies import documented_as
from optimize.api.deps import DeploymentDep
from optimize.schemas.runs import PinRequest, RegisteredSnapshot, RegisterSnapshotRequest, Snapshot, SnapshotDetail
from optimize.training.server import snapshots

router = APIRouter(prefix="/v1/training/snapshots", tags=["training"])


@router.get("/{snapshot_id}", response_model=SnapshotDetail)
def get_snapshot(snapshot_id: str, deployment: DeploymentDep) -> SnapshotDetail:
    return snapshots.get_snapshot(deployment, snapshot_id)


@router.post("/{snapshot_id}/register", response_model=RegisteredSnapshot)
def register_snapshot(snapshot_id: str, deployment: DeploymentDep,
                      body: Annotated[Any, documented_as(RegisterSnapshotRequest), Body()] = None
                      ) -> RegisteredSnapshot:
    return snapshots.register(deployment, snapshot_id, RegisterSnapshotRequest.parse(body).name)


@router.post("/{snapshot_id}/pin", response_model=Snapshot)
def pin_snapshot(snapshot_id: str, deployment: DeploymentDep,
                 body: Annotated[Any, documented_as(PinRequest), Body()] = None) -> Snapshot:
    return snapshots.pin(deployment, snapshot_id, PinRequest.parse(body).kinds, pinned=True)


@router.post("/{snapshot_id}/unpin", response_model=Snapshot)
def unpin_snapshot(snapshot_id: str, deployment: DeploymentDep,
                   body: Annotated[Any, documented_as(PinRequest), Body()] = None) -> Snapshot:
    return snapshots.pin(deployment, snapshot_id, PinRequest.parse(body).kinds, pinned=False)

