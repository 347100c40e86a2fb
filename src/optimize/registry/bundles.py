"""Scoring bundles, the registry noun `nouns.BUNDLES` on the one base (`registry/artifacts.py`): registering ZIP
archives as immutable versions, resolving references, reading, listing and moving aliases; what only a bundle has is
its archive (held, received, checked) and its check against a dataset (`registry/bundle_checks.py`).

A version is the archive's bytes exactly as they were sent, kept as a blob named by their sha256; its digest is
`sha256:` and that hex, so the same bytes are the same version of a name everywhere. Registering is two steps
so that bytes the registry holds are never sent again: the client asks whether the archive is held (a version of any
bundle holds it) and sends it only if not (`ArchiveReceiver`: streamed to a staging file, hashed, checked by the rules
of `core.bundle_zip`, then stored), then registers the digest under NS/NAME (`register_version`), which returns the
version those bytes already are, or appends one. The archive's structure is checked; its code is never imported.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from optimize.core.access import check_namespace
from optimize.core.bundle_zip import LIMITS, BundleLimits, check_archive
from optimize.core.digests import is_sha256_hex
from optimize.core.errors import ChecksumMismatch, Conflict, Invalid, TooLarge
from optimize.core.names import check_alias
from optimize.core.refs import Reference
from optimize.core.server_paths import shows_server_paths
from optimize.registry import aliases, artifact_views, artifacts
from optimize.registry.archival import refuse_if_archived
from optimize.registry.nouns import BUNDLES
from optimize.registry.quotas import check_stored_bytes, lock_namespace
from optimize.registry.uploads import Registry
from optimize.schemas import bundles as answers
from optimize.store.db import Store
from optimize.store.tables import Bundle, BundleVersion

_COPY = 1024 * 1024


# --- lookups ------------------------------------------------------------------------------------------------------


def find_bundle(session: Session, namespace: str, name: str) -> Bundle | None:
    return artifacts.find(session, BUNDLES, namespace, name)


def get_bundle(session: Session, namespace: str, name: str) -> Bundle:
    return artifacts.get(session, BUNDLES, namespace, name)


def resolve_version(session: Session, bundle: Bundle, selector: str) -> BundleVersion:
    """The version a selector names: `latest`, `vN`, an alias or `sha256:HEX`."""
    return artifacts.resolve_version(session, BUNDLES, bundle, selector)


def resolve_reference(session: Session, reference: Reference | str) -> tuple[Bundle, BundleVersion]:
    """The bundle and version a reference names; `NS/NAME` and `:latest` name the newest version."""
    return artifacts.resolve_reference(session, BUNDLES, reference)


def resolve_bundle(session: Session, reference_text: str) -> tuple[str, str]:
    """What a service records for a bundle reference (a grader's or a reward term's): the exact version,
    `NS/NAME:vN`, and the sha256 hex of its archive (the blob a worker downloads). An unknown bundle, version or
    alias is refused (NotFound, with the command that registers or lists it)."""
    bundle, version = resolve_reference(session, reference_text)
    return artifacts.reference(bundle, version), version.sha256


# --- reading ------------------------------------------------------------------------------------------------------


def _members(registry: Registry) -> artifact_views.Detail:
    """What a bundle's get adds: where the archive is kept (for an administrator's token) and its members."""
    def members(_session: Session, _bundle: Bundle, version: BundleVersion) -> dict[str, Any]:
        return {"location": registry.blobs.location(version.sha256) if shows_server_paths() else None,
                "members": [{"path": item["path"], "bytes": item["bytes"]} for item in version.members]}

    return members


def read_version(registry: Registry, namespace: str, name: str, selector: str) -> answers.BundleVersionDetail:
    return artifact_views.read_version(registry.store, BUNDLES, namespace, name, selector, _members(registry))


def list_versions(store: Store, namespace: str, name: str) -> list[answers.BundleVersion]:
    """Versions newest first."""
    return artifact_views.list_versions(store, BUNDLES, namespace, name)


def list_bundles(store: Store, namespace: str | None, include_archived: bool) -> list[answers.BundleSummary]:
    """Bundles with their newest version; archived namespaces only with `include_archived` or by name."""
    return artifact_views.list_artifacts(store, BUNDLES, namespace, include_archived)


# --- archives: held, received -------------------------------------------------------------------------------------


def check_sha256(text: str) -> str:
    """An archive's sha256 as a path or a body names it: 64 hex digits, with or without `sha256:`."""
    value = text.strip().lower().removeprefix("sha256:")
    if not is_sha256_hex(value):
        raise Invalid(f"{text[:80]!r} is not an archive digest", hint="write it as 64 hex digits (or sha256:HEX), "
                                                                      "the sha256 of the archive's bytes")
    return value


def _known(session: Session, sha256: str) -> BundleVersion | None:
    """A version (of any bundle) whose archive has these bytes: they were checked when it was registered."""
    return session.scalar(select(BundleVersion).where(BundleVersion.sha256 == sha256).limit(1))


def _target(namespace: str, name: str) -> tuple[str, str]:
    namespace, name = artifacts.checked_names(BUNDLES, namespace, name)
    check_namespace(namespace)
    return namespace, name


def archive_state(registry: Registry, namespace: str, name: str, sha256: str) -> answers.BundleArchive:
    """Whether the registry holds the archive (so registering it under NS/NAME sends no bytes)."""
    namespace, name = _target(namespace, name)
    sha256 = check_sha256(sha256)
    with registry.store.transaction() as session:
        known = _known(session, sha256)
    held = known is not None and registry.blobs.holds(sha256)
    return answers.BundleArchive(digest=f"sha256:{sha256}", held=held, bytes=known.size_bytes if held else None)


class ArchiveReceiver:
    """Receives one archive's bytes: counted against the limit and hashed as they stream into a staging file; at
    the end checked (digest, then structure) and stored in the blob store under their sha256."""

    def __init__(self, registry: Registry, sha256: str, limits: BundleLimits) -> None:
        self.registry = registry
        self.sha256 = sha256
        self.limits = limits
        self.size = 0
        self._hash = hashlib.sha256()
        descriptor, name = tempfile.mkstemp(dir=registry.blobs.staging, prefix="bundle-", suffix=".part")
        self.path = Path(name)
        self._file = os.fdopen(descriptor, "wb")

    def feed(self, chunk: bytes) -> None:
        if self.size + len(chunk) > self.limits.max_archive_bytes:
            self.abort()
            raise TooLarge(f"the archive is larger than {self.limits.max_archive_bytes:,} bytes, the most a "
                           "bundle's archive holds", hint="leave out what scoring does not read")
        self._hash.update(chunk)
        self._file.write(chunk)
        self.size += len(chunk)

    def finish(self) -> answers.BundleArchive:
        try:
            self._file.close()
            if self.size == 0:
                raise Invalid("no bytes came with the request", hint="send the bundle's ZIP archive as the body")
            actual = self._hash.hexdigest()
            if actual != self.sha256:
                raise ChecksumMismatch(f"the bytes received hash to sha256:{actual}, not sha256:{self.sha256}, the "
                                       "digest the path names", hint="send the archive under its own digest")
            summary = check_archive(self.path, self.limits)
            writer = self.registry.blobs.writer()
            try:
                with self.path.open("rb") as source:
                    while chunk := source.read(_COPY):
                        writer.write(chunk)
                writer.commit(self.sha256)
            except BaseException:
                writer.abort()
                raise
        finally:
            self.abort()
        return answers.BundleArchive(digest=f"sha256:{self.sha256}", held=True, bytes=self.size, already_held=False,
                                     files=len(summary.files), modules=summary.modules)

    def abort(self) -> None:
        if not self._file.closed:
            self._file.close()
        self.path.unlink(missing_ok=True)


def open_archive(registry: Registry, namespace: str, name: str, sha256: str, declared: int | None,
                 limits: BundleLimits = LIMITS) -> ArchiveReceiver | answers.BundleArchive:
    """A receiver for the archive's bytes, or its description when a version already holds them. Refused before a
    byte is read: a namespace outside the token's limits or archived, a digest that is not one, a declared size over
    the limit."""
    namespace, name = _target(namespace, name)
    sha256 = check_sha256(sha256)
    with registry.store.transaction() as session:
        refuse_if_archived(session, namespace)
        known = _known(session, sha256)
    if known is not None and registry.blobs.holds(sha256):
        return answers.BundleArchive(digest=f"sha256:{sha256}", held=True, bytes=known.size_bytes, already_held=True)
    if declared is not None and declared > limits.max_archive_bytes:
        raise TooLarge(f"the archive holds {declared:,} bytes; a bundle's archive holds at most "
                       f"{limits.max_archive_bytes:,}", hint="leave out what scoring does not read")
    return ArchiveReceiver(registry, sha256, limits)


# --- registering --------------------------------------------------------------------------------------------------


def register_version(registry: Registry, namespace: str, name: str, digest: Any, alias: Any,
                     limits: BundleLimits = LIMITS) -> answers.RegisteredBundle:
    """Register the held archive `digest` as a version of NS/NAME, or return the version those bytes already are;
    `alias` is pointed at it. The archive's structure is checked unless a version already holds the same bytes."""
    namespace, name = _target(namespace, name)
    if not isinstance(digest, str):
        raise Invalid("'digest' must be the archive's digest, sha256:HEX", hint="send its sha256 as sha256:HEX")
    sha256 = check_sha256(digest)
    if alias is not None and not isinstance(alias, str):
        raise Invalid("'alias' must be an alias name or null", hint="leave it out, or name an alias")
    alias = check_alias(alias) if alias else None
    with registry.store.transaction() as session:
        refuse_if_archived(session, namespace)
        known = _known(session, sha256)
        members = list(known.members) if known is not None else None
        uncompressed = known.uncompressed_bytes if known is not None else 0
    if not registry.blobs.holds(sha256):
        raise Conflict(f"the registry does not hold the archive sha256:{sha256}",
                       hint=f"send its bytes first (PUT /v1/registry/bundles/{namespace}/{name}/archives/{sha256}); "
                            "akka registry bundles register does")
    if members is None:  # bytes no version holds yet: checked now (they may be any blob)
        summary = check_archive(registry.blobs.verified_path(sha256), limits)
        members, uncompressed = [m.to_json() for m in summary.members], summary.uncompressed_bytes
    try:
        size = registry.blobs.path_for(sha256).stat().st_size
    except FileNotFoundError:  # collected since it was checked: nothing named it
        raise Conflict(f"the registry no longer holds the archive sha256:{sha256}",
                       hint="register it again; akka registry bundles register sends its bytes") from None
    return artifacts.retried(
        lambda: _register_once(registry, namespace, name, sha256, size, uncompressed, members, alias),
        lambda: Conflict(f"bundle {namespace}/{name} could not be registered under concurrent registrations",
                         hint="retry"))


def _register_once(registry: Registry, namespace: str, name: str, sha256: str, size: int, uncompressed: int,
                   members: list[dict[str, Any]], alias: str | None) -> answers.RegisteredBundle:
    with registry.store.transaction() as session:
        lock_namespace(session, namespace)  # before any row lock: its storedBytes are counted one version at a time
        registered = artifacts.append_version(
            session, BUNDLES, namespace, name, f"sha256:{sha256}",
            {"size_bytes": size, "uncompressed_bytes": uncompressed, "members": members},
            before_insert=lambda: check_stored_bytes(session, namespace, registry.quotas.of(namespace), size))
        if alias:
            move_alias(session, registered.owner, alias, registered.version)
        return artifact_views.detail(session, BUNDLES, registered.owner, registered.version,
                                     _members(registry)).extended(answers.RegisteredBundle, created=registered.created)


# --- aliases ------------------------------------------------------------------------------------------------------


def move_alias(session: Session, bundle: Bundle, alias: str, version: BundleVersion) -> bool:
    """Point `alias` at `version`, keeping its history; returns whether it moved."""
    return aliases.move_alias(session, BUNDLES, bundle, alias, version)
