"""The alias routes of a registry noun that moves aliases (`ArtifactKind.aliases`): `GET` and `PUT
{prefix}/{namespace}/{name}/aliases/{alias}`, answered by the alias models the noun declares — one pair of routes
written once for datasets, models and bundles."""

from __future__ import annotations

from fastapi import APIRouter

from optimize.api.deps import RegistryDep
from optimize.registry import aliases
from optimize.registry.artifact_kind import ArtifactKind
from optimize.schemas.common import Answer
from optimize.schemas.registry import AliasMove


def add_alias_routes(router: APIRouter, kind: ArtifactKind) -> None:
    """Add the noun's alias get and set to its router."""

    def get_alias(namespace: str, name: str, alias: str, registry: RegistryDep) -> Answer:
        return aliases.get_alias(registry.store, kind, namespace, name, alias)

    def set_alias(namespace: str, name: str, alias: str, body: AliasMove, registry: RegistryDep) -> Answer:
        return aliases.set_alias(registry.store, kind, namespace, name, alias, body.version)

    path = "/{namespace}/{name}/aliases/{alias}"
    router.add_api_route(path, get_alias, methods=["GET"], response_model=kind.answers.alias, name="get_alias",
                         summary="Get Alias",
                         description=f"Where the {kind.noun}'s alias points, and every version it pointed at before "
                                     "(`latest` too: the registry's own, on the newest version).")
    router.add_api_route(path, set_alias, methods=["PUT"], response_model=kind.answers.alias_moved,
                         name="set_alias", summary="Set Alias",
                         description=f"Point the {kind.noun}'s alias at a version (vN, another alias or sha256:HEX); "
                                     "its history keeps every move and who made it.")
