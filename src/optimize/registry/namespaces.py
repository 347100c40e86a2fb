"""Namespaces: created by the first registration into them (`registry/archival.py`); annotated, archived and
unarchived. A namespace counts the artifacts of every registry noun (`nouns.NOUNS`: datasets, models, bundles);
archiving it covers them all."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from optimize.core.access import check_namespace, only_visible, visible_namespaces
from optimize.core.clock import utcnow
from optimize.core.errors import NotFound
from optimize.core.names import check_name
from optimize.registry.archival import ensure_exists, ensure_open, is_archived, refuse_if_archived, unarchive_hint
from optimize.registry.nouns import NOUNS
from optimize.registry.views import namespace_view
from optimize.schemas import registry as answers
from optimize.store.db import Store
from optimize.store.events import record
from optimize.store.tables import Namespace

# Archival's checks, as the services outside the registry name them.
__all__ = ["annotate_namespace", "ensure_exists", "ensure_open", "get_namespace", "is_archived", "list_namespaces",
           "refuse_if_archived", "set_archived", "unarchive_hint"]


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


def _counts(session: Session) -> dict[str, dict[str, int]]:
    """Artifacts of each noun per namespace: {plural: {namespace: count}}."""
    counts: dict[str, dict[str, int]] = {}
    for kind in NOUNS:
        rows = session.execute(select(kind.owner.namespace, func.count()).group_by(kind.owner.namespace))
        counts[kind.plural] = {name: count for name, count in rows}
    return counts


def _view(namespace: Namespace, counts: dict[str, dict[str, int]]) -> answers.Namespace:
    return namespace_view(namespace, {plural: per_namespace.get(namespace.name, 0)
                                      for plural, per_namespace in counts.items()})


def list_namespaces(store: Store, include_archived: bool) -> list[answers.Namespace]:
    with store.transaction() as session:
        query = only_visible(select(Namespace).order_by(Namespace.name), visible_namespaces(Namespace.name))
        if not include_archived:
            query = query.where(Namespace.archived.is_(False))
        counts = _counts(session)
        return [_view(item, counts) for item in session.scalars(query)]


def get_namespace(store: Store, name: str) -> answers.Namespace:
    with store.transaction() as session:
        namespace = _get(session, name)
        return _view(namespace, _counts(session))


def annotate_namespace(store: Store, name: str, description: str | None) -> answers.Namespace:
    """Set the description; an empty string clears it."""
    with store.transaction() as session:
        namespace = _get(session, name)
        namespace.description = description or None
        record(session, f"namespace:{namespace.name}", "annotated", description=namespace.description)
        return _view(namespace, _counts(session))


def set_archived(store: Store, name: str, archived: bool) -> answers.NamespaceChange:
    """Archive or unarchive; doing it twice changes nothing and says so in `changed`."""
    with store.transaction() as session:
        namespace = _get(session, name)
        changed = namespace.archived != archived
        if changed:
            namespace.archived = archived
            namespace.archived_at = utcnow() if archived else None
            record(session, f"namespace:{namespace.name}", "archived" if archived else "unarchived")
        return _view(namespace, _counts(session)).extended(answers.NamespaceChange, changed=changed)
