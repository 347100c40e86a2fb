"""`GET /v1/registry/info`: the deployment's registry limits and formats."""

from __future__ import annotations

from fastapi import APIRouter

from optimize import __version__
from optimize.api.deps import RegistryDep
from optimize.chat.formats import DatasetFormat
from optimize.core.server_paths import shows_server_paths
from optimize.schemas.registry import RegistryInfo

router = APIRouter(tags=["registry"])


@router.get("/v1/registry/info", response_model=RegistryInfo)
def registry_info(registry: RegistryDep) -> RegistryInfo:
    return RegistryInfo(version=__version__,
                        datasets={**registry.limits.to_json(), "formats": [f.value for f in DatasetFormat]},
                        quotas=registry.quotas.to_json(),
                        blobs=registry.blobs.describe() if shows_server_paths() else None)
