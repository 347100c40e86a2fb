"""Deployment upkeep (administrators): `POST /v1/admin/gc` collects expired upload sessions, orphaned
shards and blobs nothing references."""

from __future__ import annotations

from fastapi import APIRouter

from optimize.api.deps import RegistryDep
from optimize.registry.collection import collect
from optimize.schemas.admin import Collected

router = APIRouter(prefix="/v1/admin", tags=["admin"])


@router.post("/gc", response_model=Collected)
def gc(registry: RegistryDep, dryRun: bool = False) -> Collected:  # noqa: N803 - the API's spelling
    return collect(registry, dry_run=dryRun)
