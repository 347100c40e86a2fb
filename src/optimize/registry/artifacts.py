"""The one base of the registry's versioned nouns (datasets, models, scoring bundles, and any declared after them).

A noun is a declaration, `ArtifactKind` (`registry/artifact_kind.py`): its tables (the named artifact NS/NAME, its
versions, and its alias pointers and their history where it has aliases), the words of its refusals, the subject of
its events, how its digest is kept and what its version views add. From the declaration the base gives every noun
the same:

- lookups: NS/NAME within the token's limits, and the version a selector names (`latest`, `vN`, an alias or
  `sha256:HEX`), refused in the noun's words;
- versions: `append_version` appends a version, or returns the one holding the same digest, taking numbers one
  registration at a time under the artifact's row lock (the unique constraints remain the guarantee) and recording
  the noun's event; the namespace is created by the first registration and an archived one takes no new versions
  (`registry/archival.py`);
- aliases with their history (`registry/aliases.py`) and the list/get views (`registry/artifact_views.py`); the
  namespace quota on stored bytes counts the nouns that declare their versions' bytes (`registry/quotas.py`).

The noun's special parts (a dataset's shards and upload sessions, a model's files, a bundle's archive and check)
stay in its own modules, on top of these.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import Select, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from optimize.core.access import check_namespace
from optimize.core.clock import utcnow
from optimize.core.errors import Conflict, NotFound
from optimize.core.names import check_name
from optimize.core.refs import Reference, parse_reference, parse_selector
from optimize.registry.archival import ensure_exists, ensure_open
from optimize.registry.artifact_kind import ArtifactKind
from optimize.store.db import insert_ignoring_conflict
from optimize.store.events import record

T = TypeVar("T")


def label(owner: Any) -> str:
    return f"{owner.namespace}/{owner.name}"


def reference(owner: Any, version: Any) -> str:
    return f"{owner.namespace}/{owner.name}:v{version.version}"


def subject(kind: ArtifactKind, owner: Any) -> str:
    """The subject of the artifact's events."""
    return f"{kind.noun}:{label(owner)}"


# --- lookups -----------------------------------------------------------------------------------------------------


def checked_names(kind: ArtifactKind, namespace: str, name: str) -> tuple[str, str]:
    """NS and NAME lowered, or refused naming the rule a name breaks."""
    return check_name(namespace, "namespace"), check_name(name, kind.wording.name)


def find(session: Session, kind: ArtifactKind, namespace: str, name: str) -> Any | None:
    return session.scalar(select(kind.owner).where(kind.owner.namespace == namespace, kind.owner.name == name))


def get(session: Session, kind: ArtifactKind, namespace: str, name: str) -> Any:
    """NS/NAME, refused when a name is not one, when the token's limits leave the namespace out, or when it does
    not exist."""
    namespace, name = checked_names(kind, namespace, name)
    check_namespace(namespace)
    owner = find(session, kind, namespace, name)
    if owner is None:
        label = f"{namespace}/{name}"
        raise NotFound(f"{kind.noun} {label} does not exist", hint=kind.wording.missing_hint(label))
    return owner


def versions_of(kind: ArtifactKind, owner: Any) -> Select:
    return select(kind.version).where(getattr(kind.version, kind.owner_column) == owner.id)


def newest_first(session: Session, kind: ArtifactKind, owner: Any, *where: Any) -> list[Any]:
    return list(session.scalars(versions_of(kind, owner).where(*where).order_by(kind.version.version.desc())))


def resolve_version(session: Session, kind: ArtifactKind, owner: Any, selector: str) -> Any:
    """The version a selector names: `latest`, `vN`, an alias or `sha256:HEX`."""
    name = label(owner)
    query = versions_of(kind, owner)
    if selector.lower() == "latest":
        found = session.scalar(query.order_by(kind.version.version.desc()).limit(1))
        if found is None:
            raise NotFound(f"{kind.noun} {name} has no versions", hint=kind.wording.empty_hint(name))
        return found
    number, alias, digest = parse_selector(selector)
    if number is not None:
        found = session.scalar(query.where(kind.version.version == number))
        what = f"version v{number}"
    elif digest is not None:
        found = session.scalar(query.where(kind.digest.matches(kind.version, digest)))
        what = f"version with digest {digest}"
    else:
        pointer = session.get(kind.aliases.pointer, (owner.id, alias)) if kind.aliases else None
        found = session.get(kind.version, pointer.version_id) if pointer else None
        what = f"alias {alias!r}"
    if found is None:
        raise NotFound(f"{kind.noun} {name} has no {what}",
                       hint=f"list its versions with: akka registry {kind.plural} versions {name}")
    return found


def resolve_reference(session: Session, kind: ArtifactKind, text: Reference | str) -> tuple[Any, Any]:
    """The artifact and version a reference names; `NS/NAME` and `:latest` name the newest version."""
    parsed = parse_reference(text) if isinstance(text, str) else text
    owner = get(session, kind, parsed.namespace, parsed.name)
    return owner, resolve_version(session, kind, owner, parsed.selector)


def newest_id(session: Session, kind: ArtifactKind, owner: Any) -> int | None:
    return session.scalar(select(kind.version.id).where(getattr(kind.version, kind.owner_column) == owner.id)
                          .order_by(kind.version.version.desc()).limit(1))


def version_count(session: Session, kind: ArtifactKind, owner: Any) -> int:
    return session.scalar(select(func.count()).select_from(kind.version)
                          .where(getattr(kind.version, kind.owner_column) == owner.id))


def aliases_by_version(session: Session, kind: ArtifactKind, owner: Any) -> dict[int, list[str]]:
    """Alias names per version id, with `latest` on the newest version."""
    result: dict[int, list[str]] = {}
    newest = newest_id(session, kind, owner)
    if newest is not None:
        result[newest] = ["latest"]
    if kind.aliases is not None:
        pointers = session.scalars(select(kind.aliases.pointer).where(
            getattr(kind.aliases.pointer, kind.owner_column) == owner.id).order_by(kind.aliases.pointer.alias))
        for pointer in pointers:
            result.setdefault(pointer.version_id, []).append(pointer.alias)
    return result


# --- versions ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Registered:
    """What `append_version` found or made: the artifact, the version, and whether this registration created it."""

    owner: Any
    version: Any
    created: bool


def append_version(
    session: Session,
    kind: ArtifactKind,
    namespace: str,
    name: str,
    digest: str,
    columns: dict[str, Any],
    *,
    owner_columns: dict[str, Any] | None = None,
    check_archived: bool = True,
    before_insert: Callable[[], None] | None = None,
) -> Registered:
    """Append a version holding `digest` (with the noun's own `columns`) to NS/NAME, or return the version that
    already holds it; creates the namespace and the artifact (with `owner_columns`) when they are new.

    An archived namespace is refused unless `check_archived` is false (work the server does on its own, such as a
    base model's selection). `before_insert` runs only when a version is about to be created, under the row lock:
    a quota's check, for instance. The new version's event is recorded on the artifact."""
    namespace, name = checked_names(kind, namespace, name)
    (ensure_open if check_archived else ensure_exists)(session, namespace)
    now = utcnow()
    insert_ignoring_conflict(session, kind.owner,
                             {"namespace": namespace, "name": name, "created_at": now, **(owner_columns or {})},
                             ["namespace", "name"])
    # Lock the artifact's row (PostgreSQL; SQLite serializes writers) so numbers are taken one registration at a
    # time; the unique constraints remain the guarantee.
    owner = session.scalar(select(kind.owner).where(kind.owner.namespace == namespace, kind.owner.name == name)
                           .with_for_update())
    existing = session.scalar(versions_of(kind, owner).where(kind.digest.matches(kind.version, digest)))
    if existing is not None:
        return Registered(owner, existing, created=False)
    if before_insert is not None:
        before_insert()
    number = (session.scalar(select(func.max(kind.version.version))
                             .where(getattr(kind.version, kind.owner_column) == owner.id)) or 0) + 1
    version = kind.version(**{kind.owner_column: owner.id, kind.digest.column: kind.digest.kept(digest)},
                           version=number, created_at=now, **columns)
    session.add(version)
    session.flush()
    record(session, subject(kind, owner), kind.registered, version=number, digest=digest)
    return Registered(owner, version, created=True)


def retried(attempt: Callable[[], T], refusal: Callable[[], Conflict]) -> T:
    """`attempt()` (one transaction), again when a concurrent registration or move inserted the same row first
    (then the next attempt reads it); `refusal()` after ten tries."""
    for tries in range(10):
        try:
            return attempt()
        except IntegrityError:
            time.sleep(0.01 * (tries + 1))
    raise refusal()
