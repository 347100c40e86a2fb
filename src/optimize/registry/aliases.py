"""Aliases of versioned registry artifacts (datasets, scoring bundles): moving one keeps its history, and the
first moves of one alias from two requests at once both succeed, one after the other."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from optimize.core.clock import iso, utcnow
from optimize.core.errors import Conflict
from optimize.core.names import check_alias
from optimize.store.db import Store
from optimize.store.events import record

T = TypeVar("T")


@dataclass(frozen=True)
class AliasTables:
    """Where one kind of artifact keeps its aliases: the pointer table, the history table, the owner's column."""

    kind: str  # the subject prefix of its events: dataset, bundle
    pointer: Any  # (owner id, alias) -> version id
    move: Any  # every version an alias pointed at
    owner_column: str  # dataset_id, bundle_id
    version: Any  # the versions table (its `version` number, `created_at`)


def move_alias(session: Session, tables: AliasTables, owner: Any, alias: str, version: Any) -> bool:
    """Point `alias` of `owner` at `version`, keeping its history; returns whether it moved."""
    alias = check_alias(alias)
    now = utcnow()
    pointer = session.get(tables.pointer, (owner.id, alias))
    if pointer is not None and pointer.version_id == version.id:
        return False
    if pointer is None:
        session.add(tables.pointer(**{tables.owner_column: owner.id}, alias=alias, version_id=version.id,
                                   updated_at=now))
    else:
        pointer.version_id = version.id
        pointer.updated_at = now
    session.add(tables.move(**{tables.owner_column: owner.id}, alias=alias, version_id=version.id, moved_at=now))
    record(session, f"{tables.kind}:{owner.namespace}/{owner.name}", "alias-moved", alias=alias,
           version=version.version)
    return True


def retried(store: Store, label: str, alias: str, move: Callable[[Session], T]) -> T:
    """`move(session)` in a transaction, again when a concurrent first move of the same alias inserted its
    pointer first (then this one reads it and moves it)."""
    for attempt in range(10):
        try:
            with store.transaction() as session:
                return move(session)
        except IntegrityError:
            time.sleep(0.01 * (attempt + 1))
    raise Conflict(f"alias {alias} of {label} could not be moved under concurrent moves", hint="retry")


def alias_json(session: Session, tables: AliasTables, owner: Any, alias: str) -> dict[str, Any]:
    """A moved alias as `alias get` shows it: the version it names and every move, oldest first."""
    pointer = session.get(tables.pointer, (owner.id, alias))
    current = session.get(tables.version, pointer.version_id)
    moves = session.execute(
        select(tables.move.moved_at, tables.version.version)
        .join(tables.version, tables.version.id == tables.move.version_id)
        .where(getattr(tables.move, tables.owner_column) == owner.id, tables.move.alias == alias)
        .order_by(tables.move.id))
    return {"alias": alias, "managed": False, "reference": f"{owner.namespace}/{owner.name}:v{current.version}",
            "version": current.version,
            "history": [{"version": version, "since": iso(moved_at)} for moved_at, version in moves]}


def latest_json(owner: Any, versions: list[Any]) -> dict[str, Any]:
    """`latest`, the alias the registry keeps on the newest version; its history is every version."""
    return {"alias": "latest", "managed": True, "reference": f"{owner.namespace}/{owner.name}:v{versions[-1].version}",
            "version": versions[-1].version,
            "history": [{"version": v.version, "since": iso(v.created_at)} for v in versions]}
