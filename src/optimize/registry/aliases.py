"""Aliases of any registry noun that declares alias tables (`ArtifactKind.aliases`): moving one keeps its history,
and the first moves of one alias from two requests at once both succeed, one after the other. `latest` is the
registry's own: always on the newest version, its history every version."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from optimize.core.access import current_token
from optimize.core.clock import iso, utcnow
from optimize.core.errors import Conflict, Invalid, NotFound
from optimize.core.names import check_alias
from optimize.registry import artifacts
from optimize.registry.artifact_kind import AliasTables, ArtifactKind
from optimize.schemas.common import Answer
from optimize.store.db import Store
from optimize.store.events import record


def _tables(kind: ArtifactKind) -> AliasTables:
    if kind.aliases is None:
        raise Invalid(f"{kind.plural} have no movable aliases; a version is named by vN, sha256:HEX or latest")
    return kind.aliases


def move_alias(session: Session, kind: ArtifactKind, owner: Any, alias: str, version: Any, by: str | None = None
               ) -> bool:
    """Point `alias` of `owner` at `version`, keeping its history and who moved it (`by`, else the name of the
    request's token; none when the server moves it on its own); returns whether it moved."""
    tables = _tables(kind)
    alias = check_alias(alias)
    now = utcnow()
    token = current_token()
    by = by or (token[1] if token is not None else None)
    pointer = session.get(tables.pointer, (owner.id, alias))
    if pointer is not None and pointer.version_id == version.id:
        return False
    if pointer is None:
        session.add(tables.pointer(**{kind.owner_column: owner.id}, alias=alias, version_id=version.id,
                                   updated_at=now))
    else:
        pointer.version_id = version.id
        pointer.updated_at = now
    session.add(tables.move(**{kind.owner_column: owner.id}, alias=alias, version_id=version.id, moved_at=now,
                            moved_by=by))
    record(session, artifacts.subject(kind, owner), "alias-moved", alias=alias, version=version.version, by=by)
    return True


def set_alias(store: Store, kind: ArtifactKind, namespace: str, name: str, alias: str, selector: str) -> Answer:
    """Point NS/NAME's `alias` at the version `selector` names: the alias as `alias get` shows it, and `moved`."""
    def move() -> Answer:
        with store.transaction() as session:
            owner = artifacts.get(session, kind, namespace, name)
            moved = move_alias(session, kind, owner, alias, artifacts.resolve_version(session, kind, owner, selector))
            return alias_view(session, kind, owner, check_alias(alias)).extended(kind.answers.alias_moved,
                                                                                 moved=moved)

    return artifacts.retried(move, lambda: Conflict(
        f"alias {alias} of {namespace}/{name} could not be moved under concurrent moves", hint="retry"))


def get_alias(store: Store, kind: ArtifactKind, namespace: str, name: str, alias: str) -> Answer:
    """Where the alias points and every version it pointed at; `latest` too."""
    with store.transaction() as session:
        owner = artifacts.get(session, kind, namespace, name)
        alias = kind.wording.alias_name(alias)
        label = artifacts.label(owner)
        if alias == "latest":
            versions = list(reversed(artifacts.newest_first(session, kind, owner)))
            if not versions:
                raise NotFound(f"{kind.noun} {label} has no versions", hint=kind.wording.empty_hint(label))
            return latest_view(kind, owner, versions)
        if kind.aliases is None or session.get(kind.aliases.pointer, (owner.id, alias)) is None:
            raise NotFound(f"{kind.noun} {label} has no alias {alias!r}",
                           hint=kind.wording.no_alias_hint(label, alias))
        return alias_view(session, kind, owner, alias)


def alias_view(session: Session, kind: ArtifactKind, owner: Any, alias: str) -> Answer:
    """A moved alias as `alias get` shows it: the version it names and every move, oldest first."""
    tables = _tables(kind)
    pointer = session.get(tables.pointer, (owner.id, alias))
    current = session.get(kind.version, pointer.version_id)
    moves = session.execute(
        select(tables.move.moved_at, kind.version.version, tables.move.moved_by)
        .join(kind.version, kind.version.id == tables.move.version_id)
        .where(getattr(tables.move, kind.owner_column) == owner.id, tables.move.alias == alias)
        .order_by(tables.move.id))
    return kind.answers.alias(alias=alias, managed=False, reference=artifacts.reference(owner, current),
                              version=current.version,
                              history=[{"version": version, "since": iso(moved_at), "by": by}
                                       for moved_at, version, by in moves])


def alias_moves(session: Session, kind: ArtifactKind, owner: Any) -> list[dict[str, Any]]:
    """Every move of every alias of `owner`, oldest first: the alias, the version it moved from (null: it was
    new) and to, who moved it and when."""
    tables = _tables(kind)
    rows = session.execute(
        select(tables.move.alias, kind.version.version, tables.move.moved_by, tables.move.moved_at)
        .join(kind.version, kind.version.id == tables.move.version_id)
        .where(getattr(tables.move, kind.owner_column) == owner.id)
        .order_by(tables.move.id))
    moves, last = [], {}
    for alias, version, by, at in rows:
        moves.append({"alias": alias, "from": last.get(alias), "to": version, "by": by, "at": iso(at)})
        last[alias] = version
    return moves


def latest_view(kind: ArtifactKind, owner: Any, versions: list[Any]) -> Answer:
    """`latest`, the alias the registry keeps on the newest version; its history is every version."""
    return kind.answers.alias(alias="latest", managed=True, reference=artifacts.reference(owner, versions[-1]),
                              version=versions[-1].version,
                              history=[{"version": v.version, "since": iso(v.created_at), "by": None}
                                       for v in versions])
