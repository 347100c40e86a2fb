"""The per-project quotas on work (core.quotas): runs not yet ended and work waiting for devices, checked when new
work is submitted and, for queued work, when a paused run is resumed or an ended evaluation or distillation
queued again; and each project's usage for `training capacity` and `registry info`.

Each check takes the project's lock first (`lock_project`, also taken by `open_project`) and holds it until the
transaction that stores the work commits, so concurrent submissions count one after another and never admit
more than the quota.

What counts comes from the kinds registered with the kernel, as for `work_in_progress`: a run is open in any phase its
lifecycle does not call terminal, and an item of any project kind is queued in the phase where it waits for a
grant.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from optimize.core.errors import TooMany
from optimize.core.quotas import Quota, Quotas
from optimize.jobs.registry import kinds
from optimize.projects.service import lock_project
from optimize.registry.quotas import registry_usage
from optimize.store.tables import Project

RUN = "run"


def _project_kinds():
    return [kind for kind in kinds() if kind.project_work]


def _open_runs(session, project: str) -> list[str]:
    for kind in _project_kinds():
        lifecycle = kind.lifecycle
        if lifecycle.kind == RUN:
            table, phase = lifecycle.table, getattr(lifecycle.table, lifecycle.column)
            open_phases = [p.value for p in lifecycle.phases if p not in lifecycle.terminal]
            return list(session.scalars(select(table.id).where(table.project == project, phase.in_(open_phases))
                                        .order_by(table.created_at)))
    return []


def _queued(session, project: str) -> list[str]:
    items = []
    for kind in _project_kinds():
        if not kind.worker:  # the server's own work (a comparison) waits for other jobs, never for devices
            continue
        lifecycle = kind.lifecycle
        table, phase = lifecycle.table, getattr(lifecycle.table, lifecycle.column)
        items += [f"{lifecycle.kind} {item_id[:12]}" for item_id in session.scalars(
            select(table.id).where(table.project == project, phase == kind.waiting.value).order_by(table.created_at))]
    return items


def check_new_work(session, project: str, kind: str, quotas: Quotas) -> None:
    """Refuses new work of `kind` (run, evaluation, endpoint) the project's quota has no room for: 429 naming the
    quota and the items holding it."""
    lock_project(session, project)  # held until the work is stored: no other check counts in between
    quota = quotas.of(project)
    if kind == RUN:
        runs = _open_runs(session, project)
        if len(runs) >= quota.open_runs:
            _refuse(project, "openRuns", quota.open_runs, [f"run {r[:12]}" for r in runs],
                    "open runs", "let some end, or cancel those you no longer need (akka training runs cancel RUN)")
    check_queue_room(session, project, quotas)


def check_queue_room(session, project: str, quotas: Quotas) -> None:
    """Refuses one more item waiting for devices (new work, a resumed run, a retried evaluation) when the project's
    queuedWork quota is used up."""
    lock_project(session, project)  # held until the item is stored: no other check counts in between
    quota = quotas.of(project)
    queued = _queued(session, project)
    if len(queued) >= quota.queued_work:
        _refuse(project, "queuedWork", quota.queued_work, queued, "items of work waiting for devices",
                "wait for some to start, or cancel those you no longer need")


def _refuse(project: str, quota: str, limit: int, holders: list[str], what: str, advice: str) -> None:
    named = ", ".join(holders[:5]) + (f" and {len(holders) - 5} more" if len(holders) > 5 else "")
    variable = {"openRuns": "OPTIMIZE_QUOTA_OPEN_RUNS", "queuedWork": "OPTIMIZE_QUOTA_QUEUED_WORK"}[quota]
    raise TooMany(f"project {project} already has {len(holders)} {what}, its quota {quota} ({limit}); "
                  f"held by {named}", hint=f"{advice}; or ask the operator to raise {variable} (or this project's "
                                           f"{quota} in OPTIMIZE_PROJECT_QUOTAS)",
                  quota=quota, limit=limit, used=len(holders))


def quota_usage(session, quotas: Quotas, projects: list[str] | None = None) -> list[dict[str, Any]]:
    """Each project's quota and what it uses now (the projects named, else every project not archived)."""
    if projects is None:
        projects = list(session.scalars(select(Project.name).where(Project.archived.is_(False))
                                        .order_by(Project.name)))
    rows = []
    for name in projects:
        quota: Quota = quotas.of(name)
        used = {"openRuns": len(_open_runs(session, name)), "queuedWork": len(_queued(session, name)),
                **registry_usage(session, name)}
        rows.append({"project": name, "quota": quota.to_json(), "used": used})
    return rows
