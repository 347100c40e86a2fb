"""Namespaces: created by the first registration into them; annotated, archived and unarchived. A namespace counts
its datasets, models and bundles; archiving it covers all three."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from optimize.core.access import check_namespace, only_visible, visible_namespaces
from optimize.core.clock import utcnow
from optimize.core.errors import NotFound, Refused
from optimize.core.names import check_name
from optimize.registry.views import namespace_json
from optimize.store.db import Store, insert_ignoring_conflict
from optimize.store.events import record
from optimize.store.tables import Bundle, Dataset, Model, Namespace


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


def _get(session: Session, name: str) -> Namespace:
    name = check_name(name, "namespace")
    check_namespace(name)
    namespace = session.get(Namespace, name)
    if namespace is None:
        raise NotFound(
            f"namespace {name!r} does not exist",
            hint="a namespace is created by the first registration into it",
        )
    return namespace


def _counts(session: Session, table) -> dict[str, int]:
    """Rows of `table` (datasets, models or bundles) per namespace."""
    rows = session.execute(select(table.namespace, func.count()).group_by(table.namespace))
    return {name: count for name, count in rows}


def _with_bundles(body: dict[str, Any], bundles: dict[str, int]) -> dict[str, Any]:
    body["bundles"] = bundles.get(body["name"], 0)
    return body


def _json(session: Session, namespace: Namespace) -> dict[str, Any]:
    return _with_bundles(namespace_json(namespace, _counts(session, Dataset).get(namespace.name, 0),
                                        _counts(session, Model).get(namespace.name, 0)), _counts(session, Bundle))


def list_namespaces(store: Store, include_archived: bool) -> list[dict[str, Any]]:
    with store.transaction() as session:
        query = only_visible(select(Namespace).order_by(Namespace.name), visible_namespaces(Namespace.name))
        if not include_archived:
            query = query.where(Namespace.archived.is_(False))
        datasets, models, bundles = _counts(session, Dataset), _counts(session, Model), _counts(session, Bundle)
        return [_with_bundles(namespace_json(item, datasets.get(item.name, 0), models.get(item.name, 0)), bundles)
                for item in session.scalars(query)]


def get_namespace(store: Store, name: str) -> dict[str, Any]:
    with store.transaction() as session:
        namespace = _get(session, name)
        return _json(session, namespace)


def annotate_namespace(store: Store, name: str, description: str | None) -> dict[str, Any]:
    """Set the description; an empty string clears it."""
    with store.transaction() as session:
        namespace = _get(session, name)
        namespace.description = description or None
        record(session, f"namespace:{namespace.name}", "annotated", description=namespace.description)
        return _json(session, namespace)


def set_archived(store: Store, name: str, archived: bool) -> dict[str, Any]:
    """Archive or unarchive; doing it twice changes nothing and says so in `changed`."""
    with store.transaction() as session:
        namespace = _get(session, name)
        changed = namespace.archived != archived
        if changed:
            namespace.archived = archived
            namespace.archived_at = utcnow() if archived else None
            record(session, f"namespace:{namespace.name}", "archived" if archived else "unarchived")
        body = _json(session, namespace)
        body["changed"] = changed
        return body
