"""Registry datasets: list, get a version, versions, a version's rows and objects, aliases."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response, StreamingResponse

from optimize.api.alias_routes import add_alias_routes
from optimize.api.deps import RegistryDep
from optimize.api.params import Limit
from optimize.registry import datasets
from optimize.registry.nouns import DATASETS
from optimize.registry.rows import MOST_ROWS, PAGE_ROWS, read_rows
from optimize.schemas.registry import (
    DatasetList,
    DatasetRows,
    DatasetVersionDetail,
    DatasetVersionList,
)

router = APIRouter(prefix="/v1/registry/datasets", tags=["registry"])
add_alias_routes(router, DATASETS)  # GET and PUT …/{namespace}/{name}/aliases/{alias}


@router.get("", response_model=DatasetList)
def list_datasets(registry: RegistryDep, namespace: str | None = None, archived: bool = False) -> DatasetList:
    return DatasetList(datasets=datasets.list_datasets(registry.store, namespace, archived))


@router.get("/{namespace}/{name}", response_model=DatasetVersionDetail)
def get_dataset(namespace: str, name: str, registry: RegistryDep) -> DatasetVersionDetail:
    return datasets.read_version(registry.store, namespace, name, "latest", registry.blobs.location)


@router.get("/{namespace}/{name}/versions", response_model=DatasetVersionList)
def list_versions(namespace: str, name: str, registry: RegistryDep) -> DatasetVersionList:
    return DatasetVersionList(versions=datasets.list_versions(registry.store, namespace, name))


@router.get("/{namespace}/{name}/versions/{selector}", response_model=DatasetVersionDetail)
def get_version(namespace: str, name: str, selector: str, registry: RegistryDep) -> DatasetVersionDetail:
    return datasets.read_version(registry.store, namespace, name, selector, registry.blobs.location)


@router.get("/{namespace}/{name}/versions/{selector}/rows", response_model=DatasetRows)
def get_rows(namespace: str, name: str, selector: str, registry: RegistryDep,
             offset: Annotated[int, Query(ge=0, le=10**12, description="Rows to skip")] = 0,
             limit: Limit = None) -> DatasetRows:
    """A page of the version's rows as stored (the dashboard's row viewer): `limit` rows (default 20), at most 100
    a page whatever `limit` asks."""
    return read_rows(registry.store, registry.blobs, namespace, name, selector, offset,
                     min(limit or PAGE_ROWS, MOST_ROWS))


@router.get("/{namespace}/{name}/versions/{selector}/objects/{path:path}", response_class=Response,
            responses={200: {"description": "The object's bytes, exactly as registered",
                             "content": {"application/octet-stream": {"schema": {
                                 "type": "string", "format": "binary",
                                 "description": "The object's bytes (a shard: JSONL, one row a line); its sha256 is "
                                                "in X-Checksum-Sha256"}}}}})
async def get_object(namespace: str, name: str, selector: str, path: str, registry: RegistryDep
                     ) -> StreamingResponse:
    """One object of the version (a shard, as `get` lists its objects), streamed as far as its bytes match their
    digest: a stored copy that does not is quarantined and the stream cut short."""
    _reference, found = await run_in_threadpool(datasets.find_object, registry.store, namespace, name, selector, path)
    size, chunks = await run_in_threadpool(registry.blobs.stream, found.sha256)
    return StreamingResponse(chunks, media_type="application/octet-stream", headers={
        "Content-Length": str(size), "X-Checksum-Sha256": found.sha256, "X-Content-Type-Options": "nosniff"})
