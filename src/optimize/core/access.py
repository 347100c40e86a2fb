"""What the current request's token may see: all projects and namespaces, or only the ones it is limited to.

The token gate sets the limits for the request (a context variable, which follows the request into the threads
its handlers run in); the services check them where a project or namespace is looked up by name or an item by id,
and filter their lists with them. Work the server does on its own (the scheduler, the collector, workers' calls)
runs outside any request and sees everything.

A limited token asking for a project or namespace by name outside its limits is answered 403 naming it (the caller
gave the name); an item by id (a run, an evaluation) in another project is not found (the services look it up
under `visible_*`), so a limited token learns no other project's name, nor that the item exists.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from optimize.core.errors import Forbidden


@dataclass(frozen=True, slots=True)
class AccessLimits:
    """A token's limits: None for projects or namespaces means all of them. `token_id` names the token to what
    counts per token (its name need not be unique)."""

    token_name: str
    projects: frozenset[str] | None = None
    namespaces: frozenset[str] | None = None
    token_id: str | None = None

    def sees_project(self, name: str | None) -> bool:
        return self.projects is None or (name or "").lower() in self.projects

    def sees_namespace(self, name: str | None) -> bool:
        return self.namespaces is None or (name or "").lower() in self.namespaces


_current: ContextVar[AccessLimits | None] = ContextVar("optimize_access_limits", default=None)


@contextmanager
def limited_to(limits: AccessLimits | None) -> Iterator[None]:
    """Everything inside runs under `limits` (None: unlimited)."""
    mark = _current.set(limits)
    try:
        yield
    finally:
        _current.reset(mark)


def current() -> AccessLimits | None:
    """The limits of the request being served; None when it has none (or no request is being served)."""
    limits = _current.get()
    return limits if limits is not None and (limits.projects is not None or limits.namespaces is not None) else None


def current_token() -> tuple[str, str] | None:
    """(id, name) of the token serving the current request, limited or not; None outside a request."""
    limits = _current.get()
    return None if limits is None else (limits.token_id or limits.token_name, limits.token_name)


def check_project(name: str) -> None:
    """Refuses a project outside the token's limits, naming it (the caller gave the name)."""
    limits = current()
    if limits is not None and not limits.sees_project(name):
        _refuse(limits.token_name, "project", limits.projects, name)


def check_namespace(name: str) -> None:
    """Refuses a registry namespace outside the token's limits (its datasets, models and uploads with it)."""
    limits = current()
    if limits is not None and not limits.sees_namespace(name):
        _refuse(limits.token_name, "namespace", limits.namespaces, name)


def _refuse(token: str, noun: str, allowed: frozenset[str] | None, name: str) -> None:
    raise Forbidden(f"token {token} is limited to {noun}(s) {', '.join(sorted(allowed or ())) or 'none'}; "
                    f"{noun} {name.lower()!r} is outside them", hint=f"use a token limited to that {noun}, or an "
                                                                      "unlimited one")


def sees_namespace(name: str) -> bool:
    limits = current()
    return limits is None or limits.sees_namespace(name)


def visible_projects(column: Any) -> Any | None:
    """A query condition keeping the rows whose project `column` the token sees; None when it sees all."""
    limits = current()
    return None if limits is None or limits.projects is None else column.in_(sorted(limits.projects))


def visible_namespaces(column: Any) -> Any | None:
    """A query condition keeping the rows whose namespace `column` the token sees; None when it sees all."""
    limits = current()
    return None if limits is None or limits.namespaces is None else column.in_(sorted(limits.namespaces))


def visible_references(column: Any) -> Any | None:
    """A query condition keeping the rows whose registry reference `column` (NAMESPACE/NAME…) is in a namespace
    the token sees; None when it sees all."""
    limits = current()
    if limits is None or limits.namespaces is None:
        return None
    from sqlalchemy import false, or_  # only when a limited token asks (core stays free of the store otherwise)

    return or_(false(), *[column.startswith(f"{name}/") for name in sorted(limits.namespaces)])


def visible_item(table: Any) -> Any | None:
    """The condition for an item of work: by its project, or by the dataset it measures (an analysis)."""
    if hasattr(table, "project"):
        return visible_projects(table.project)
    return visible_references(table.dataset_reference) if hasattr(table, "dataset_reference") else None


def only_visible(query: Any, condition: Any | None) -> Any:
    return query if condition is None else query.where(condition)
