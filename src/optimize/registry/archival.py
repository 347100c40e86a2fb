"""Archival, for every registry noun alike: a namespace exists from the first registration into it, and while it is
archived it takes no new version of any noun (its artifacts stay readable, shown `archived`). Archiving and
unarchiving a namespace are `registry/namespaces.py`."""

from __future__ import annotations

from sqlalchemy.orm import Session

from optimize.core.access import check_namespace
from optimize.core.clock import utcnow
from optimize.core.errors import Refused
from optimize.store.db import insert_ignoring_conflict
from optimize.store.tables import Namespace


def unarchive_hint(name: str) -> str:
    return f"unarchive it with: akka registry namespaces unarchive {name}"


def ensure_exists(session: Session, name: str) -> Namespace:
    """The namespace, created if it is new (namespaces exist from the first registration into them)."""
    insert_ignoring_conflict(
        session, Namespace, {"name": name, "archived": False, "created_at": utcnow()}, ["name"]
    )
    namespace = session.get(Namespace, name)
    assert namespace is not None
    return namespace


def ensure_open(session: Session, name: str) -> Namespace:
    """Create the namespace if it is new; refuse registration into an archived one."""
    check_namespace(name)
    namespace = ensure_exists(session, name)
    if namespace.archived:
        raise Refused(f"namespace {name!r} is archived; it takes no new versions", hint=unarchive_hint(name))
    return namespace


def is_archived(session: Session, name: str) -> bool:
    item = session.get(Namespace, name)
    return bool(item and item.archived)


def refuse_if_archived(session: Session, name: str) -> None:
    namespace = session.get(Namespace, name)
    if namespace is not None and namespace.archived:
        raise Refused(f"namespace {name!r} is archived; it takes no new versions", hint=unarchive_hint(name))
