"""Liveness: `GET /v1/health`, a coroutine that reads no more than the app's state, so it answers on the event loop
whatever the threads are busy with."""

from __future__ import annotations

from fastapi import APIRouter

from optimize import __version__
from optimize.api.deps import RegistryDep
from optimize.schemas.common import Health

router = APIRouter()


@router.get("/v1/health", response_model=Health)
async def health(registry: RegistryDep) -> Health:
    return Health(status="ok", version=__version__, database=registry.store.engine.dialect.name)
