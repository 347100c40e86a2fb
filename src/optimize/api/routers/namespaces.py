"""Registry namespaces: list, get, annotate, archive, unarchive."""

from __future__ import annotations

from fastapi import APIRouter

from optimize.api.deps import RegistryDep
from optimize.registry import namespaces
from optimize.schemas.registry import Annotation, Namespace, NamespaceChange, NamespaceList

router = APIRouter(prefix="/v1/registry/namespaces", tags=["registry"])


@router.get("", response_model=NamespaceList)
def list_namespaces(registry: RegistryDep, archived: bool = False) -> NamespaceList:
    return NamespaceList(namespaces=namespaces.list_namespaces(registry.store, archived))


@router.get("/{namespace}", response_model=Namespace)
def get_namespace(namespace: str, registry: RegistryDep) -> Namespace:
    return namespaces.get_namespace(registry.store, namespace)


@router.patch("/{namespace}", response_model=Namespace)
def annotate_namespace(namespace: str, body: Annotation, registry: RegistryDep) -> Namespace:
    return namespaces.annotate_namespace(registry.store, namespace, body.description)


@router.post("/{namespace}/archive", response_model=NamespaceChange)
def archive_namespace(namespace: str, registry: RegistryDep) -> NamespaceChange:
    return namespaces.set_archived(registry.store, namespace, True)


@router.post("/{namespace}/unarchive", response_model=NamespaceChange)
def unarchive_namespace(namespace: str, registry: RegistryDep) -> NamespaceChange:
    return namespaces.set_archived(registry.store, namespace, False)
