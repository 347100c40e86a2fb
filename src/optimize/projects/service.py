"""Training projects: create, get, list. A project's name is the registry namespace its models go under, so it
follows the registry's name rules, and additionally must not look like an id or be `counts`."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import func, select

from optimize.core.clock import iso, utcnow
from optimize.core.errors import Invalid, NotFound, Refused
from optimize.core.names import check_name
from optimize.store.db import Store, insert_ignoring_conflict
from optimize.store.tables import Project, Run

_ID_SHAPED = re.compile(r"[0-9a-f]{8,}")
RESERVED = frozenset({"counts"})


def check_project_name(text: str) -> str:
    name = check_name(text, "project name")
    if _ID_SHAPED.fullmatch(name):
        raise Invalid(f"project name {name!r} looks like an id", hint="choose a name with letters other than a-f")
    if name in RESERVED:
        raise Invalid(f"project name {name!r} is reserved", hint="choose another name")
    return name


def project_json(project: Project, runs: int = 0) -> dict[str, Any]:
    return {"name": project.name, "namespace": project.name, "description": project.description,
            "archived": project.archived, "createdAt": iso(project.created_at), "runs": runs}


def create_project(store: Store, name: str, description: str | None = None) -> tuple[dict[str, Any], bool]:
    """Create a project (idempotent: an existing one is returned); returns (project, created)."""
    name = check_project_name(name)
    with store.transaction() as session:
        created = insert_ignoring_conflict(session, Project, {
            "name": name, "description": description, "archived": False, "created_at": utcnow()}, ["name"]) == 1
        project = session.get(Project, name)
        return project_json(project, _run_count(session, name)), created


def find_project(session, name: str) -> Project:
    project = session.get(Project, name.lower())
    if project is None:
        raise NotFound(f"training project {name!r} does not exist",
                       hint=f"create it with: akka training projects create {name.lower()}")
    return project


def open_project(session, name: str) -> Project:
    """The project new work goes into; refused when archived."""
    project = find_project(session, name)
    if project.archived:
        raise Refused(f"training project {project.name!r} is archived and takes no new work",
                      hint=f"akka training projects unarchive {project.name}")
    return project


def get_project(store: Store, name: str) -> dict[str, Any]:
    with store.transaction() as session:
        project = find_project(session, name)
        return project_json(project, _run_count(session, project.name))


def list_projects(store: Store, include_archived: bool = False) -> list[dict[str, Any]]:
    with store.transaction() as session:
        query = select(Project).order_by(Project.created_at.desc())
        if not include_archived:
            query = query.where(Project.archived.is_(False))
        counts = dict(session.execute(select(Run.project, func.count()).group_by(Run.project)).all())
        return [project_json(p, counts.get(p.name, 0)) for p in session.scalars(query)]


def _run_count(session, name: str) -> int:
    return session.scalar(select(func.count()).select_from(Run).where(Run.project == name)) or 0


__all__ = ["check_project_name", "create_project", "find_project", "get_project", "list_projects",
           "open_project"]
