"""The deployment a request runs against, handed to routes as a dependency."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from fastapi import Depends, Request

from optimize.catalog.catalog import Catalog
from optimize.catalog.schema import DeviceProfile
from optimize.store.db import Store

from optimize.registry.uploads import Registry


@dataclass(frozen=True)
class Training:
    """What the training routes need: the store, the applied catalog, the device profiles, the data dir."""

    store: Store
    catalog: Catalog
    profiles: list[DeviceProfile]
    data_dir: Path


def get_registry(request: Request) -> Registry:
    return request.app.state.registry


def get_training(request: Request) -> Training:
    return request.app.state.training


RegistryDep = Annotated[Registry, Depends(get_registry)]
TrainingDep = Annotated[Training, Depends(get_training)]
