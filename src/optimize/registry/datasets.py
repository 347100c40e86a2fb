"""Datasets: resolving references to versions, reading versions, listing, and moving aliases.

A version's JSON carries its `lineage`: what produced it when a job did (`registry/produced.py`), null for an
uploaded version.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from optimize.blobs.local import LocalBlobStore
from optimize.core.access import check_namespace, only_visible, visible_namespaces
from optimize.core.errors import NotFound
from optimize.core.names import check_alias, check_name
from optimize.core.refs import Reference, parse_selector
from optimize.registry import aliases
from optimize.registry.aliases import AliasTables
from optimize.registry.namespaces import is_archived
from optimize.registry.views import version_json
from optimize.store.db import Store
from optimize.store.tables import (
    Dataset,
    DatasetAlias,
    DatasetAliasMove,
    DatasetObject,
    DatasetVersion,
    Namespace,
)

Locator = Callable[[str], str]
_READ = 4 * 1024 * 1024


def find_dataset(session: Session, namespace: str, name: str) -> Dataset | None:
    return session.scalar(select(Dataset).where(Dataset.namespace == namespace, Dataset.name == name))


def get_dataset(session: Session, namespace: str, name: str) -> Dataset:
    namespace, name = check_name(namespace, "namespace"), check_name(name, "name")
    check_namespace(namespace)
    dataset = find_dataset(session, namespace, name)
    if dataset is None:
        raise NotFound(
            f"dataset {namespace}/{name} does not exist",
            hint=f"register it with: akka registry datasets register {namespace}/{name} -f FILE",
        )
    return dataset


def resolve_version(session: Session, dataset: Dataset, selector: str) -> DatasetVersion:
    """The version a selector names: `latest`, `vN`, an alias or `sha256:HEX`."""
    label = f"{dataset.namespace}/{dataset.name}"
    query = select(DatasetVersion).where(DatasetVersion.dataset_id == dataset.id)
    if selector.lower() == "latest":
        found = session.scalar(query.order_by(DatasetVersion.version.desc()).limit(1))
        if found is None:
            raise NotFound(f"dataset {label} has no versions")
        return found
    number, alias, digest = parse_selector(selector)
    if number is not None:
        found = session.scalar(query.where(DatasetVersion.version == number))
        what = f"version v{number}"
    elif digest is not None:
        found = session.scalar(query.where(DatasetVersion.digest == digest))
        what = f"a version with digest {digest}"
    else:
        pointer = session.get(DatasetAlias, (dataset.id, alias))
        found = session.get(DatasetVersion, pointer.version_id) if pointer else None
        what = f"alias {alias!r}"
    if found is None:
        raise NotFound(f"dataset {label} has no {what}",
                       hint=f"list its versions with: akka registry datasets versions {label}")
    return found


def resolve_reference(session: Session, reference: Reference) -> tuple[Dataset, DatasetVersion]:
    dataset = get_dataset(session, reference.namespace, reference.name)
    return dataset, resolve_version(session, dataset, reference.selector)


def aliases_by_version(session: Session, dataset: Dataset) -> dict[int, list[str]]:
    """Alias names per version id, with `latest` on the newest version."""
    result: dict[int, list[str]] = {}
    newest = session.scalar(
        select(DatasetVersion.id).where(DatasetVersion.dataset_id == dataset.id)
        .order_by(DatasetVersion.version.desc()).limit(1)
    )
    if newest is not None:
        result[newest] = ["latest"]
    pointers = session.scalars(
        select(DatasetAlias).where(DatasetAlias.dataset_id == dataset.id).order_by(DatasetAlias.alias)
    )
    for pointer in pointers:
        result.setdefault(pointer.version_id, []).append(pointer.alias)
    return result


def examples_objects(session: Session, digest: str) -> list[dict[str, Any]]:
    """The objects (shards) holding the examples of a version digest, in order, as a job reads them."""
    return [{"path": o.path, "sha256": o.sha256, "bytes": o.size_bytes, "rows": o.rows}
            for o in version_objects(session, _version_by_digest(session, digest))]


def _version_by_digest(session: Session, digest: str) -> DatasetVersion:
    version = session.scalar(select(DatasetVersion).where(DatasetVersion.digest == digest).limit(1))
    if version is None:
        raise NotFound(f"no dataset version holds the examples {digest}")
    return version


def version_objects(session: Session, version: DatasetVersion) -> list[DatasetObject]:
    return list(session.scalars(select(DatasetObject).where(DatasetObject.version_id == version.id)
                                .order_by(DatasetObject.position)))


_CONTENT_DIGESTS: dict[str, str] = {}  # version digest -> content digest; both name immutable bytes
_CONTENT_DIGESTS_KEPT = 4096


def content_digest(session: Session, blobs: LocalBlobStore, digest: str) -> str:
    """`sha256:HEX` of the examples of a version digest: their bytes in order, whatever shard size cut them, so
    the same examples registered with another `--shard-size` (another version digest) have the same content
    digest. One object's is its own digest; several are read once, and remembered, since neither changes."""
    known = _CONTENT_DIGESTS.get(digest)
    if known is not None:
        return known
    shas = [o.sha256 for o in version_objects(session, _version_by_digest(session, digest))]
    if len(shas) == 1:
        return f"sha256:{shas[0]}"
    hasher = hashlib.sha256()
    for sha256 in shas:
        with blobs.open_held(sha256, f"shard sha256:{sha256} of dataset version {digest}") as handle:
            while chunk := handle.read(_READ):
                hasher.update(chunk)
    if len(_CONTENT_DIGESTS) >= _CONTENT_DIGESTS_KEPT:
        _CONTENT_DIGESTS.pop(next(iter(_CONTENT_DIGESTS)))
    _CONTENT_DIGESTS[digest] = found = f"sha256:{hasher.hexdigest()}"
    return found


def dataset_version_json(
    dataset: Dataset,
    version: DatasetVersion,
    *,
    archived: bool,
    aliases: list[str],
    objects: list[DatasetObject] | None = None,
    location: Locator | None = None,
) -> dict[str, Any]:
    """A dataset version's JSON (`views.version_json`) with its `lineage` after `conversion`, before any objects."""
    body = version_json(dataset, version, archived=archived, aliases=aliases, objects=objects, location=location)
    listed = body.pop("objects", None)
    body["lineage"] = version.lineage
    if listed is not None:
        body["objects"] = listed
    return body


def describe_version(
    session: Session, dataset: Dataset, version: DatasetVersion, locate: Locator, with_objects: bool = True
) -> dict[str, Any]:
    objects = None
    if with_objects:
        objects = list(
            session.scalars(
                select(DatasetObject).where(DatasetObject.version_id == version.id).order_by(DatasetObject.position)
            )
        )
    return dataset_version_json(
        dataset,
        version,
        archived=is_archived(session, dataset.namespace),
        aliases=aliases_by_version(session, dataset).get(version.id, []),
        objects=objects,
        location=locate,
    )


def read_version(store: Store, namespace: str, name: str, selector: str, locate: Locator) -> dict[str, Any]:
    with store.transaction() as session:
        dataset = get_dataset(session, namespace, name)
        version = resolve_version(session, dataset, selector)
        body = describe_version(session, dataset, version, locate)
        body["kind"] = dataset.kind
        body["versionCount"] = session.scalar(
            select(func.count()).select_from(DatasetVersion).where(DatasetVersion.dataset_id == dataset.id)
        )
        return body


def list_versions(store: Store, namespace: str, name: str) -> list[dict[str, Any]]:
    """Versions newest first."""
    with store.transaction() as session:
        dataset = get_dataset(session, namespace, name)
        versions = session.scalars(
            select(DatasetVersion).where(DatasetVersion.dataset_id == dataset.id)
            .order_by(DatasetVersion.version.desc())
        )
        archived = is_archived(session, dataset.namespace)
        aliases = aliases_by_version(session, dataset)
        return [
            dataset_version_json(dataset, item, archived=archived, aliases=aliases.get(item.id, []))
            for item in versions
        ]


def list_datasets(store: Store, namespace: str | None, include_archived: bool) -> list[dict[str, Any]]:
    """Datasets with their newest version; archived namespaces only with `include_archived` or by name."""
    with store.transaction() as session:
        query = select(Dataset, Namespace).join(Namespace, Namespace.name == Dataset.namespace)
        if namespace is not None:
            query = query.where(Dataset.namespace == check_name(namespace, "namespace"))
            check_namespace(namespace)
        elif not include_archived:
            query = query.where(Namespace.archived.is_(False))
        items = []
        query = only_visible(query, visible_namespaces(Dataset.namespace))
        for dataset, space in session.execute(query.order_by(Dataset.namespace, Dataset.name)):
            latest = resolve_version(session, dataset, "latest")
            count = session.scalar(
                select(func.count()).select_from(DatasetVersion).where(DatasetVersion.dataset_id == dataset.id)
            )
            items.append(
                {
                    "dataset": f"{dataset.namespace}/{dataset.name}",
                    "namespace": dataset.namespace,
                    "name": dataset.name,
                    "kind": dataset.kind,
                    "versions": count,
                    "archived": space.archived,
                    "latest": dataset_version_json(
                        dataset, latest, archived=space.archived,
                        aliases=aliases_by_version(session, dataset).get(latest.id, []),
                    ),
                }
            )
        return items


ALIASES = AliasTables("dataset", DatasetAlias, DatasetAliasMove, "dataset_id", DatasetVersion)


def move_alias(session: Session, dataset: Dataset, alias: str, version: DatasetVersion) -> bool:
    """Point `alias` at `version`, keeping its history; returns whether it moved."""
    return aliases.move_alias(session, ALIASES, dataset, alias, version)


def set_alias(store: Store, namespace: str, name: str, alias: str, selector: str) -> dict[str, Any]:
    def move(session: Session) -> dict[str, Any]:
        dataset = get_dataset(session, namespace, name)
        moved = move_alias(session, dataset, alias, resolve_version(session, dataset, selector))
        return {**_alias_json(session, dataset, check_alias(alias)), "moved": moved}

    return aliases.retried(store, f"{namespace}/{name}", alias, move)


def get_alias(store: Store, namespace: str, name: str, alias: str) -> dict[str, Any]:
    with store.transaction() as session:
        dataset = get_dataset(session, namespace, name)
        alias = alias.lower()
        if alias == "latest":
            versions = session.scalars(
                select(DatasetVersion).where(DatasetVersion.dataset_id == dataset.id).order_by(DatasetVersion.version)
            ).all()
            if not versions:
                raise NotFound(f"dataset {namespace}/{name} has no versions")
            return aliases.latest_json(dataset, versions)
        if session.get(DatasetAlias, (dataset.id, alias)) is None:
            raise NotFound(f"dataset {dataset.namespace}/{dataset.name} has no alias {alias!r}")
        return _alias_json(session, dataset, alias)


def _alias_json(session: Session, dataset: Dataset, alias: str) -> dict[str, Any]:
    return aliases.alias_json(session, ALIASES, dataset, alias)
