"""Registry models: list, get (newest version with the version list), versions (filtered), one version."""

from __future__ import annotations

from fastapi import APIRouter, Query

from optimize.api.deps import RegistryDep
from optimize.core.errors import Invalid
from optimize.registry import models
from optimize.schemas.registry import ModelDetail, ModelList, ModelVersionDetail, ModelVersionList

router = APIRouter(prefix="/v1/registry/models", tags=["registry"])


@router.get("", response_model=ModelList)
def list_models(
    registry: RegistryDep,
    namespace: str | None = Query(None, description="Only this namespace (archived or not)"),
    project: str | None = Query(None, description="A training project: the same as its namespace"),
    archived: bool = Query(False, description="Include archived namespaces"),
) -> dict:
    if namespace and project and namespace.lower() != project.lower():
        raise Invalid(f"namespace {namespace!r} and project {project!r} disagree",
                      hint="a project's models are in the namespace of the same name; give one of them")
    return {"models": models.list_models(registry.store, namespace or project, archived)}


@router.get("/{namespace}/{name}", response_model=ModelDetail)
def get_model(namespace: str, name: str, registry: RegistryDep) -> dict:
    body = models.get_model(registry.store, namespace, name, "latest")
    body["versions"] = models.list_versions(registry.store, namespace, name)
    return body


@router.get("/{namespace}/{name}/versions", response_model=ModelVersionList)
def list_versions(
    namespace: str,
    name: str,
    registry: RegistryDep,
    base_model: str | None = Query(None, alias="baseModel", description="Only versions over this base model"),
    produced_by_kind: str | None = Query(None, alias="producedByKind", description="Producer kind, e.g. run"),
    produced_by_id: str | None = Query(None, alias="producedById", description="Producer id, e.g. a run id"),
) -> dict:
    return {"versions": models.list_versions(registry.store, namespace, name, base_model,
                                             produced_by_kind, produced_by_id)}


@router.get("/{namespace}/{name}/versions/{selector}", response_model=ModelVersionDetail)
def get_version(namespace: str, name: str, selector: str, registry: RegistryDep) -> dict:
    return models.get_model(registry.store, namespace, name, selector)
