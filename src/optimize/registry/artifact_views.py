"""The list and get views of any registry noun, from its declaration (`ArtifactKind`).

A version's view is the shared head (reference, the artifact as NS/NAME under the noun's key, namespace, name,
version, digest), what the noun's `fields` add, its aliases (`latest` on the newest), whether its namespace is
archived, and its `lineage` where the noun keeps one. A list entry names the artifact, what the noun's `summary`
adds, its version count, whether its namespace is archived, and its newest version. Archived namespaces are left
out of a list unless asked for, or named. Each view is built by the answer model the noun declares (`answers`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from optimize.core.access import check_namespace, only_visible, visible_namespaces
from optimize.core.names import check_name
from optimize.registry import artifacts
from optimize.registry.archival import is_archived
from optimize.registry.artifact_kind import ArtifactKind
from optimize.schemas.common import Answer
from optimize.store.db import Store
from optimize.store.tables import Namespace

# What a noun's get view adds after the version's view: (session, artifact, version) -> fields.
Detail = Callable[[Session, Any, Any], dict[str, Any]]


def version_view(kind: ArtifactKind, owner: Any, version: Any, *, archived: bool, aliases: list[str]) -> Answer:
    body: dict[str, Any] = {
        "reference": artifacts.reference(owner, version),
        kind.noun: artifacts.label(owner),
        "namespace": owner.namespace,
        "name": owner.name,
        "version": version.version,
        "digest": kind.digest.shown(version),
        **kind.fields(version),
        "aliases": aliases,
        "archived": archived,
    }
    if kind.lineage is not None:
        body["lineage"] = getattr(version, kind.lineage)
    return kind.answers.version(**body)


def describe(session: Session, kind: ArtifactKind, owner: Any, version: Any) -> Answer:
    """A version's view, its aliases and its namespace's archival read from the store."""
    return version_view(kind, owner, version, archived=is_archived(session, owner.namespace),
                        aliases=artifacts.aliases_by_version(session, kind, owner).get(version.id, []))


def detail(session: Session, kind: ArtifactKind, owner: Any, version: Any, extra: Detail | None = None) -> Answer:
    """A version as a get shows it: its view, what the noun adds (`extra`), and how many versions it has."""
    added = extra(session, owner, version) if extra is not None else {}
    return describe(session, kind, owner, version).extended(
        kind.answers.detail, **added, versionCount=artifacts.version_count(session, kind, owner))


def read_version(store: Store, kind: ArtifactKind, namespace: str, name: str, selector: str,
                 extra: Detail | None = None) -> Answer:
    """The version of NS/NAME a selector names, as a get shows it."""
    with store.transaction() as session:
        owner = artifacts.get(session, kind, namespace, name)
        return detail(session, kind, owner, artifacts.resolve_version(session, kind, owner, selector), extra)


def version_list(session: Session, kind: ArtifactKind, owner: Any, versions: list[Any]) -> list[Answer]:
    """The views of `versions` of one artifact, in their order."""
    archived = is_archived(session, owner.namespace)
    aliases = artifacts.aliases_by_version(session, kind, owner)
    return [version_view(kind, owner, item, archived=archived, aliases=aliases.get(item.id, [])) for item in versions]


def list_versions(store: Store, kind: ArtifactKind, namespace: str, name: str) -> list[Answer]:
    """Versions newest first."""
    with store.transaction() as session:
        owner = artifacts.get(session, kind, namespace, name)
        return version_list(session, kind, owner, artifacts.newest_first(session, kind, owner))


def list_artifacts(store: Store, kind: ArtifactKind, namespace: str | None, include_archived: bool) -> list[Answer]:
    """The noun's artifacts with their newest version, by namespace and name; archived namespaces only with
    `include_archived` or by name."""
    with store.transaction() as session:
        query = select(kind.owner, Namespace).join(Namespace, Namespace.name == kind.owner.namespace)
        if namespace is not None:
            query = query.where(kind.owner.namespace == check_name(namespace, "namespace"))
            check_namespace(namespace)
        elif not include_archived:
            query = query.where(Namespace.archived.is_(False))
        query = only_visible(query, visible_namespaces(kind.owner.namespace))
        items = []
        for owner, space in session.execute(query.order_by(kind.owner.namespace, kind.owner.name)):
            latest = artifacts.resolve_version(session, kind, owner, "latest")
            items.append(kind.answers.summary(**{
                kind.noun: artifacts.label(owner),
                "namespace": owner.namespace,
                "name": owner.name,
                **kind.summary(owner),
                "versions": artifacts.version_count(session, kind, owner),
                "archived": space.archived,
                "latest": version_view(kind, owner, latest, archived=space.archived,
                                       aliases=artifacts.aliases_by_version(session, kind, owner).get(latest.id, [])),
            }))
        return items
