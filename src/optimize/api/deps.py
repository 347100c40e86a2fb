"""The deployment a request runs against, handed to routes as a dependency."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from optimize.deployment import Deployment
from optimize.registry.uploads import Registry


# coroutines, not functions: FastAPI runs a function dependency on a thread of anyio's shared pool, and these read
# no more than the app's state (a route like /v1/health then needs no thread at all)
async def get_registry(request: Request) -> Registry:
    return request.app.state.registry


async def get_deployment(request: Request) -> Deployment:
    return request.app.state.deployment


RegistryDep = Annotated[Registry, Depends(get_registry)]
DeploymentDep = Annotated[Deployment, Depends(get_deployment)]
