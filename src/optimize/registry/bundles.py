"""Scoring bundles: registering ZIP archives as immutable versions, resolving references, reading, listing and
moving aliases.

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
import time
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from optimize.core.access import check_namespace, only_visible, visible_namespaces
from optimize.core.bundle_zip import LIMITS, BundleLimits, BundleSummary, Member, check_archive
from optimize.core.clock import iso, utcnow
from optimize.core.digests import is_sha256_hex
from optimize.core.errors import ChecksumMismatch, Conflict, Invalid, NotFound, TooLarge
from optimize.core.names import check_alias, check_name
from optimize.core.refs import Reference, parse_reference, parse_selector
from optimize.core.server_paths import shows_server_paths
from optimize.registry import aliases
from optimize.registry.aliases import AliasTables
from optimize.registry.namespaces import ensure_open, is_archived, refuse_if_archived
from optimize.registry.quotas import check_stored_bytes, lock_namespace
from optimize.registry.uploads import Registry
from optimize.store.db import Store, insert_ignoring_conflict
from optimize.store.events import record
from optimize.store.tables import Bundle, BundleAlias, BundleAliasMove, BundleVersion, Namespace

_COPY = 1024 * 1024


def _register_hint(namespace: str, name: str) -> str:
    return f"register it with: akka registry bundles register {namespace}/{name} -f DIR_OR_ZIP"


# --- lookups ------------------------------------------------------------------------------------------------------


def find_bundle(session: Session, namespace: str, name: str) -> Bundle | None:
    return session.scalar(select(Bundle).where(Bundle.namespace == namespace, Bundle.name == name))


def get_bundle(session: Session, namespace: str, name: str) -> Bundle:
    namespace, name = check_name(namespace, "namespace"), check_name(name, "bundle name")
    check_namespace(namespace)
    bundle = find_bundle(session, namespace, name)
    if bundle is None:
        raise NotFound(f"bundle {namespace}/{name} does not exist", hint=_register_hint(namespace, name))
    return bundle


def resolve_version(session: Session, bundle: Bundle, selector: str) -> BundleVersion:
    """The version a selector names: `latest`, `vN`, an alias or `sha256:HEX`."""
    label = f"{bundle.namespace}/{bundle.name}"
    query = select(BundleVersion).where(BundleVersion.bundle_id == bundle.id)
    if selector.lower() == "latest":
        found = session.scalar(query.order_by(BundleVersion.version.desc()).limit(1))
        if found is None:
            raise NotFound(f"bundle {label} has no versions", hint=_register_hint(bundle.namespace, bundle.name))
        return found
    number, alias, digest = parse_selector(selector)
    if number is not None:
        found = session.scalar(query.where(BundleVersion.version == number))
        what = f"version v{number}"
    elif digest is not None:
        found = session.scalar(query.where(BundleVersion.sha256 == digest.removeprefix("sha256:")))
        what = f"a version with digest {digest}"
    else:
        pointer = session.get(BundleAlias, (bundle.id, alias))
        found = session.get(BundleVersion, pointer.version_id) if pointer else None
        what = f"alias {alias!r}"
    if found is None:
        raise NotFound(f"bundle {label} has no {what}",
                       hint=f"list its versions with: akka registry bundles versions {label}")
    return found


def resolve_reference(session: Session, reference: Reference | str) -> tuple[Bundle, BundleVersion]:
    """The bundle and version a reference names; `NS/NAME` and `:latest` name the newest version."""
    if isinstance(reference, str):
        reference = parse_reference(reference)
    bundle = get_bundle(session, reference.namespace, reference.name)
    return bundle, resolve_version(session, bundle, reference.selector)


def resolve_bundle(session: Session, reference_text: str) -> tuple[str, str]:
    """What a service records for a bundle reference (a grader's or a reward term's): the exact version,
    `NS/NAME:vN`, and the sha256 hex of its archive (the blob a worker downloads). An unknown bundle, version or
    alias is refused (NotFound, with the command that registers or lists it)."""
    bundle, version = resolve_reference(session, reference_text)
    return f"{bundle.namespace}/{bundle.name}:v{version.version}", version.sha256


def aliases_by_version(session: Session, bundle: Bundle) -> dict[int, list[str]]:
    """Alias names per version id, with `latest` on the newest version."""
    result: dict[int, list[str]] = {}
    newest = session.scalar(select(BundleVersion.id).where(BundleVersion.bundle_id == bundle.id)
                            .order_by(BundleVersion.version.desc()).limit(1))
    if newest is not None:
        result[newest] = ["latest"]
    pointers = session.scalars(select(BundleAlias).where(BundleAlias.bundle_id == bundle.id)
                               .order_by(BundleAlias.alias))
    for pointer in pointers:
        result.setdefault(pointer.version_id, []).append(pointer.alias)
    return result


def _version_count(session: Session, bundle: Bundle) -> int:
    return session.scalar(select(func.count()).select_from(BundleVersion)
                          .where(BundleVersion.bundle_id == bundle.id))


# --- JSON ---------------------------------------------------------------------------------------------------------


def version_json(bundle: Bundle, version: BundleVersion, *, archived: bool, aliases: list[str]) -> dict[str, Any]:
    summary = BundleSummary([Member(item["path"], item["bytes"]) for item in version.members])
    return {
        "reference": f"{bundle.namespace}/{bundle.name}:v{version.version}",
        "bundle": f"{bundle.namespace}/{bundle.name}",
        "namespace": bundle.namespace,
        "name": bundle.name,
        "version": version.version,
        "digest": f"sha256:{version.sha256}",
        "bytes": version.size_bytes,
        "uncompressedBytes": version.uncompressed_bytes,
        "files": len(summary.files),
        "directories": len(summary.directories),
        "modules": summary.modules,
        "aliases": aliases,
        "archived": archived,
        "createdAt": iso(version.created_at),
    }


def describe_version(session: Session, bundle: Bundle, version: BundleVersion, registry: Registry,
                     with_members: bool = True) -> dict[str, Any]:
    """A version's JSON with its aliases; with its members, how many versions the bundle has and where the archive
    is kept."""
    body = version_json(bundle, version, archived=is_archived(session, bundle.namespace),
                        aliases=aliases_by_version(session, bundle).get(version.id, []))
    if with_members:
        body["versionCount"] = _version_count(session, bundle)
        body["location"] = registry.blobs.location(version.sha256) if shows_server_paths() else None
        body["members"] = [{"path": item["path"], "bytes": item["bytes"]} for item in version.members]
    return body


# --- reading ------------------------------------------------------------------------------------------------------


def read_version(registry: Registry, namespace: str, name: str, selector: str) -> dict[str, Any]:
    with registry.store.transaction() as session:
        bundle = get_bundle(session, namespace, name)
        return describe_version(session, bundle, resolve_version(session, bundle, selector), registry)


def list_versions(store: Store, namespace: str, name: str) -> list[dict[str, Any]]:
    """Versions newest first."""
    with store.transaction() as session:
        bundle = get_bundle(session, namespace, name)
        versions = session.scalars(select(BundleVersion).where(BundleVersion.bundle_id == bundle.id)
                                   .order_by(BundleVersion.version.desc()))
        archived = is_archived(session, bundle.namespace)
        aliases = aliases_by_version(session, bundle)
        return [version_json(bundle, item, archived=archived, aliases=aliases.get(item.id, [])) for item in versions]


def list_bundles(store: Store, namespace: str | None, include_archived: bool) -> list[dict[str, Any]]:
    """Bundles with their newest version; archived namespaces only with `include_archived` or by name."""
    with store.transaction() as session:
        query = select(Bundle, Namespace).join(Namespace, Namespace.name == Bundle.namespace)
        if namespace is not None:
            query = query.where(Bundle.namespace == check_name(namespace, "namespace"))
            check_namespace(namespace)
        elif not include_archived:
            query = query.where(Namespace.archived.is_(False))
        query = only_visible(query, visible_namespaces(Bundle.namespace))
        items = []
        for bundle, space in session.execute(query.order_by(Bundle.namespace, Bundle.name)):
            latest = resolve_version(session, bundle, "latest")
            items.append({
                "bundle": f"{bundle.namespace}/{bundle.name}",
                "namespace": bundle.namespace,
                "name": bundle.name,
                "versions": _version_count(session, bundle),
                "archived": space.archived,
                "latest": version_json(bundle, latest, archived=space.archived,
                                       aliases=aliases_by_version(session, bundle).get(latest.id, [])),
            })
        return items


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
    namespace, name = check_name(namespace, "namespace"), check_name(name, "bundle name")
    check_namespace(namespace)
    return namespace, name


def archive_state(registry: Registry, namespace: str, name: str, sha256: str) -> dict[str, Any]:
    """Whether the registry holds the archive (so registering it under NS/NAME sends no bytes)."""
    namespace, name = _target(namespace, name)
    sha256 = check_sha256(sha256)
    with registry.store.transaction() as session:
        known = _known(session, sha256)
    held = known is not None and registry.blobs.holds(sha256)
    return {"digest": f"sha256:{sha256}", "held": held, "bytes": known.size_bytes if held else None}


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

    def finish(self) -> dict[str, Any]:
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
        return {"digest": f"sha256:{self.sha256}", "held": True, "bytes": self.size, "alreadyHeld": False,
                "files": len(summary.files), "modules": summary.modules}

    def abort(self) -> None:
        if not self._file.closed:
            self._file.close()
        self.path.unlink(missing_ok=True)


def open_archive(registry: Registry, namespace: str, name: str, sha256: str, declared: int | None,
                 limits: BundleLimits = LIMITS) -> ArchiveReceiver | dict[str, Any]:
    """A receiver for the archive's bytes, or its description when a version already holds them. Refused before a
    byte is read: a namespace outside the token's limits or archived, a digest that is not one, a declared size over
    the limit."""
    namespace, name = _target(namespace, name)
    sha256 = check_sha256(sha256)
    with registry.store.transaction() as session:
        refuse_if_archived(session, namespace)
        known = _known(session, sha256)
    if known is not None and registry.blobs.holds(sha256):
        return {"digest": f"sha256:{sha256}", "held": True, "bytes": known.size_bytes, "alreadyHeld": True}
    if declared is not None and declared > limits.max_archive_bytes:
        raise TooLarge(f"the archive holds {declared:,} bytes; a bundle's archive holds at most "
                       f"{limits.max_archive_bytes:,}", hint="leave out what scoring does not read")
    return ArchiveReceiver(registry, sha256, limits)


# --- registering --------------------------------------------------------------------------------------------------


def register_version(registry: Registry, namespace: str, name: str, digest: Any, alias: Any,
                     limits: BundleLimits = LIMITS) -> dict[str, Any]:
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
    for attempt in range(10):
        try:
            return _register_once(registry, namespace, name, sha256, size, uncompressed, members, alias)
        except IntegrityError:
            time.sleep(0.01 * (attempt + 1))  # another registration took the same row at the same moment
    raise Conflict(f"bundle {namespace}/{name} could not be registered under concurrent registrations", hint="retry")


def _register_once(registry: Registry, namespace: str, name: str, sha256: str, size: int, uncompressed: int,
                   members: list[dict[str, Any]], alias: str | None) -> dict[str, Any]:
    with registry.store.transaction() as session:
        lock_namespace(session, namespace)  # before any row lock: its storedBytes are counted one version at a time
        ensure_open(session, namespace)
        now = utcnow()
        insert_ignoring_conflict(session, Bundle, {"namespace": namespace, "name": name, "created_at": now},
                                 ["namespace", "name"])
        # Lock the bundle row (PostgreSQL; SQLite serializes writers) so version numbers are taken one registration
        # at a time; the unique constraints remain the guarantee.
        bundle = session.scalar(select(Bundle).where(Bundle.namespace == namespace, Bundle.name == name)
                                .with_for_update())
        version = session.scalar(select(BundleVersion).where(BundleVersion.bundle_id == bundle.id,
                                                             BundleVersion.sha256 == sha256))
        created = version is None
        if created:
            check_stored_bytes(session, namespace, registry.quotas.of(namespace), size)
            number = (session.scalar(select(func.max(BundleVersion.version))
                                     .where(BundleVersion.bundle_id == bundle.id)) or 0) + 1
            version = BundleVersion(bundle_id=bundle.id, version=number, sha256=sha256, size_bytes=size,
                                    uncompressed_bytes=uncompressed, members=members, created_at=now)
            session.add(version)
            session.flush()
            record(session, f"bundle:{namespace}/{name}", "version-registered", version=number,
                   digest=f"sha256:{sha256}")
        if alias:
            move_alias(session, bundle, alias, version)
        body = describe_version(session, bundle, version, registry)
        body["created"] = created
        return body


# --- aliases ------------------------------------------------------------------------------------------------------


ALIASES = AliasTables("bundle", BundleAlias, BundleAliasMove, "bundle_id", BundleVersion)


def move_alias(session: Session, bundle: Bundle, alias: str, version: BundleVersion) -> bool:
    """Point `alias` at `version`, keeping its history; returns whether it moved."""
    return aliases.move_alias(session, ALIASES, bundle, alias, version)


def set_alias(store: Store, namespace: str, name: str, alias: str, selector: str) -> dict[str, Any]:
    def move(session: Session) -> dict[str, Any]:
        bundle = get_bundle(session, namespace, name)
        moved = move_alias(session, bundle, alias, resolve_version(session, bundle, selector))
        return {**_alias_json(session, bundle, check_alias(alias)), "moved": moved}

    return aliases.retried(store, f"{namespace}/{name}", alias, move)


def get_alias(store: Store, namespace: str, name: str, alias: str) -> dict[str, Any]:
    with store.transaction() as session:
        bundle = get_bundle(session, namespace, name)
        alias = check_name(alias, "alias")
        label = f"{bundle.namespace}/{bundle.name}"
        if alias == "latest":
            versions = session.scalars(select(BundleVersion).where(BundleVersion.bundle_id == bundle.id)
                                       .order_by(BundleVersion.version)).all()
            if not versions:
                raise NotFound(f"bundle {label} has no versions", hint=_register_hint(bundle.namespace, bundle.name))
            return aliases.latest_json(bundle, versions)
        if session.get(BundleAlias, (bundle.id, alias)) is None:
            raise NotFound(f"bundle {label} has no alias {alias!r}",
                           hint=f"point it at a version with: akka registry bundles alias set {label}:{alias} "
                                "--version vN")
        return _alias_json(session, bundle, alias)


def _alias_json(session: Session, bundle: Bundle, alias: str) -> dict[str, Any]:
    return aliases.alias_json(session, ALIASES, bundle, alias)
