"""Registry namespaces: list, get, annotate, archive, unarchive."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from optimize.api.deps import RegistryDep
from optimize.registry import namespaces

router = APIRouter(prefix="/v1/registry/namespaces", tags=["registry"])


class Annotation(BaseModel):
    model_config = ConfigDict(extra="forbid")
    description: str | None = Field(description="New description; an empty string clears it")


@router.get("")
def list_namespaces(registry: RegistryDep, archived: bool = False) -> dict:
    return {"namespaces": namespaces.list_namespaces(registry.store, archived)}


@router.get("/{namespace}")
def get_namespace(namespace: str, registry: RegistryDep) -> dict:
    return namespaces.get_namespace(registry.store, namespace)


@router.patch("/{namespace}")
def annotate_namespace(namespace: str, body: Annotation, registry: RegistryDep) -> dict:
    return namespaces.annotate_namespace(registry.store, namespace, body.description)


@router.post("/{namespace}/archive")
def archive_namespace(namespace: str, registry: RegistryDep) -> dict:
    return namespaces.set_archived(registry.store, namespace, True)


@router.post("/{namespace}/unarchive")
def unarchive_namespace(namespace: str, registry: RegistryDep) -> dict:
    return namespaces.set_archived(registry.store, namespace, False)
