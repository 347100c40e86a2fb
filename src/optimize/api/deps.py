"""The deployment a request runs against, handed to routes as a dependency."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from optimize.deployment import Deployment
from optimize.registry.uploads import Registry


def get_registry(request: Request) -> Registry:
    return request.app.state.registry


def get_training(request: Request) -> Deployment:
    return request.app.state.training


RegistryDep = Annotated[Registry, Depends(get_registry)]
TrainingDep = Annotated[Deployment, Depends(get_training)]
