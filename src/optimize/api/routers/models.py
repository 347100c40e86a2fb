"""Registry models: list, get (newest version with the version list and alias moves), versions (filtered), one
version, its aliases, and a version's files (the list, and each file's bytes) for downloads."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response, StreamingResponse

from optimize.api.alias_routes import add_alias_routes
from optimize.api.bodies import documented_as
from optimize.api.deps import DeploymentDep, RegistryDep
from optimize.core.digests import verified_chunks
from optimize.core.errors import Invalid
from optimize.registry import model_files, models
from optimize.registry.nouns import MODELS
from optimize.schemas.models import ModelFiles, ModelRegister
from optimize.schemas.registry import ModelDetail, ModelList, ModelVersionDetail, ModelVersionList
from optimize.training.server import snapshots

router = APIRouter(prefix="/v1/registry/models", tags=["registry"])
add_alias_routes(router, MODELS)  # GET and PUT …/{namespace}/{name}/aliases/{alias}


@router.get("", response_model=ModelList)
def list_models(
    registry: RegistryDep,
    namespace: str | None = Query(None, description="Only this namespace (archived or not)"),
    project: str | None = Query(None, description="A training project: the same as its namespace"),
    archived: bool = Query(False, description="Include archived namespaces"),
) -> ModelList:
    if namespace and project and namespace.lower() != project.lower():
        raise Invalid(f"namespace {namespace!r} and project {project!r} disagree",
                      hint="a project's models are in the namespace of the same name; give one of them")
    return ModelList(models=models.list_models(registry.store, namespace or project, archived))


@router.get("/{namespace}/{name}", response_model=ModelDetail)
def get_model(namespace: str, name: str, registry: RegistryDep) -> ModelDetail:
    """The newest version, every version, and every move of the model's aliases."""
    return models.read_model(registry.store, namespace, name)


@router.post("/{namespace}/{name}/versions", response_model=ModelVersionDetail)
def register_version(namespace: str, name: str, deployment: DeploymentDep,
                     body: Annotated[Any, documented_as(ModelRegister), Body()]) -> ModelVersionDetail:
    """Register a run's save (a snapshot holding its adapter's weights, e.g. a branch's best step) as a version of
    NS/NAME, NS being the run's project; the same weights again answer the version they already are."""
    request = ModelRegister.parse(body)
    return snapshots.register_in_registry(deployment, namespace, name, request.snapshot, request.alias)


@router.get("/{namespace}/{name}/versions", response_model=ModelVersionList)
def list_versions(
    namespace: str,
    name: str,
    registry: RegistryDep,
    base_model: str | None = Query(None, alias="baseModel", description="Only versions over this base model"),
    produced_by_kind: str | None = Query(None, alias="producedByKind", description="Producer kind, e.g. run"),
    produced_by_id: str | None = Query(None, alias="producedById", description="Producer id, e.g. a run id"),
) -> ModelVersionList:
    return ModelVersionList(versions=models.list_versions(registry.store, namespace, name, base_model,
                                                          produced_by_kind, produced_by_id))


@router.get("/{namespace}/{name}/versions/{selector}", response_model=ModelVersionDetail)
def get_version(namespace: str, name: str, selector: str, registry: RegistryDep) -> ModelVersionDetail:
    return models.get_model(registry.store, namespace, name, selector)


@router.get("/{namespace}/{name}/versions/{selector}/files", response_model=ModelFiles)
async def list_files(namespace: str, name: str, selector: str, deployment: DeploymentDep) -> ModelFiles:
    """What downloading the version writes: each file's path, sha256 and size (an adapter's folder with the
    tokenizer and chat template it trained under, or a base model's selected folder)."""
    listed = await run_in_threadpool(model_files.version_files, deployment.store, deployment.blobs, deployment.catalog,
                                     namespace, name, selector)  # a base model's first listing hashes its files
    return listed.answer()


@router.get("/{namespace}/{name}/versions/{selector}/files/{path:path}", response_class=Response,
            responses={200: {"description": "The file's bytes, as listed by …/files (its sha256 and size)",
                             "content": {"application/octet-stream": {
                                 "schema": {"type": "string", "format": "binary",
                                            "description": "The file's bytes"}}}}})
async def get_file(namespace: str, name: str, selector: str, path: str, deployment: DeploymentDep) -> Response:
    """One file of the version, streamed; its digest is the one the file list gives."""
    item = await run_in_threadpool(model_files.version_file, deployment.store, deployment.blobs, deployment.catalog,
                                   namespace, name, selector, path)
    headers = {"X-Content-Type-Options": "nosniff", "X-Checksum-Sha256": item.sha256}
    filename = item.path.rsplit("/", 1)[-1]
    headers["Content-Disposition"] = f'attachment; filename="{filename}"'
    if item.content is not None:
        return Response(item.content, media_type="application/octet-stream", headers=headers)
    # the bytes leave only as far as they match the digest listed: a stored object that does not is quarantined
    if item.source == "adapter":
        size, chunks = await run_in_threadpool(deployment.blobs.stream, item.sha256)
    else:
        size, chunks = item.location.stat().st_size, verified_chunks(item.location, item.sha256)
    return StreamingResponse(chunks, media_type="application/octet-stream",
                             headers={**headers, "Content-Length": str(size)})
