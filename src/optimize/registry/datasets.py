"""Datasets, the registry noun `nouns.DATASETS` on the one base (`registry/artifacts.py`): resolving references to
versions, reading versions with their shards, listing, moving aliases, and what only a dataset has — the shards
(objects) a version is cut into and the content digest of its examples. Versions are appended by an upload's
commit (`registry/uploads.py`).

A version's JSON carries its `lineage`: what produced it when a job did (`registry/produced.py`), null for an
uploaded version.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from optimize.blobs.local import LocalBlobStore
from optimize.core.errors import NotFound
from optimize.core.refs import Reference
from optimize.registry import aliases, artifact_views, artifacts
from optimize.registry.nouns import DATASETS
from optimize.registry.views import dataset_objects
from optimize.schemas import registry as answers
from optimize.store.db import Store
from optimize.store.tables import Dataset, DatasetObject, DatasetVersion

Locator = Callable[[str], str]
_READ = 4 * 1024 * 1024


def find_dataset(session: Session, namespace: str, name: str) -> Dataset | None:
    return artifacts.find(session, DATASETS, namespace, name)


def get_dataset(session: Session, namespace: str, name: str) -> Dataset:
    return artifacts.get(session, DATASETS, namespace, name)


def resolve_version(session: Session, dataset: Dataset, selector: str) -> DatasetVersion:
    """The version a selector names: `latest`, `vN`, an alias or `sha256:HEX`."""
    return artifacts.resolve_version(session, DATASETS, dataset, selector)


def resolve_reference(session: Session, reference: Reference) -> tuple[Dataset, DatasetVersion]:
    return artifacts.resolve_reference(session, DATASETS, reference)


def examples_objects(session: Session, digest: str) -> list[dict[str, Any]]:
    """The objects (shards) holding the examples of a version digest, in order, as a job reads them."""
    return [{"path": o.path, "sha256": o.sha256, "bytes": o.size_bytes, "rows": o.rows}
            for o in version_objects(session, _version_by_digest(session, digest))]


def version_images(session: Session, digest: str) -> list[dict[str, Any]]:
    """The images the rows of a version digest name ({path, sha256, bytes}), as a job reads them."""
    return list(_version_by_digest(session, digest).images or [])


def version_format(session: Session, digest: str) -> str:
    """The format of the version a digest names (chat-jsonl-v1, preference-jsonl-v1, prepared-tokens-v1)."""
    return _version_by_digest(session, digest).format


def _version_by_digest(session: Session, digest: str) -> DatasetVersion:
    version = session.scalar(select(DatasetVersion).where(DatasetVersion.digest == digest).limit(1))
    if version is None:
        raise NotFound(f"no dataset version holds the examples {digest}")
    return version


def find_object(store: Store, namespace: str, name: str, selector: str, path: str) -> tuple[str, DatasetObject]:
    """(the version's reference, its object at `path`): a shard as `get` lists it; a path the version does not hold
    is refused naming the ones it does."""
    with store.transaction() as session:
        dataset = get_dataset(session, namespace, name)
        version = resolve_version(session, dataset, selector)
        objects = version_objects(session, version)
        reference = f"{dataset.namespace}/{dataset.name}:v{version.version}"
        found = next((item for item in objects if item.path == path), None)
        if found is None:
            raise NotFound(f"dataset {reference} holds no object {path!r} (it holds: "
                           f"{', '.join(item.path for item in objects)})",
                           hint=f"list its objects with: akka registry datasets get {reference}")
        session.expunge(found)
        return reference, found


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


def describe_committed(session: Session, dataset: Dataset, version: DatasetVersion, locate: Locator, created: bool
                       ) -> answers.CommittedVersion:
    """A committed version's view with its shards (where each is kept, for an administrator's token) and whether
    this commit created it."""
    return artifact_views.describe(session, DATASETS, dataset, version).extended(
        answers.CommittedVersion, objects=dataset_objects(version_objects(session, version), locate), created=created)


def read_version(store: Store, namespace: str, name: str, selector: str, locate: Locator
                 ) -> answers.DatasetVersionDetail:
    """A version with its shards, the dataset's kind and its version count."""
    def shards_and_kind(session: Session, dataset: Dataset, version: DatasetVersion) -> dict[str, Any]:
        return {"objects": dataset_objects(version_objects(session, version), locate), "kind": dataset.kind}

    return artifact_views.read_version(store, DATASETS, namespace, name, selector, shards_and_kind)


def list_versions(store: Store, namespace: str, name: str) -> list[answers.DatasetVersion]:
    """Versions newest first."""
    return artifact_views.list_versions(store, DATASETS, namespace, name)


def list_datasets(store: Store, namespace: str | None, include_archived: bool) -> list[answers.DatasetSummary]:
    """Datasets with their newest version; archived namespaces only with `include_archived` or by name."""
    return artifact_views.list_artifacts(store, DATASETS, namespace, include_archived)


def move_alias(session: Session, dataset: Dataset, alias: str, version: DatasetVersion) -> bool:
    """Point `alias` at `version`, keeping its history; returns whether it moved."""
    return aliases.move_alias(session, DATASETS, dataset, alias, version)
