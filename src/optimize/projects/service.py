"""Training projects: create, get, list, archive, unarchive, and the standing evaluation they hold. A project's
name is the registry namespace its models go under, so it follows the registry's name rules, and additionally must
not look like an id or be `counts`.

Archiving a project hides it and its runs from lists and refuses new work for it; reads still work. The registry
namespace of the same name is separate state: archiving the project leaves it as it is, and the answer says so."""

from __future__ import annotations

import re

from sqlalchemy import func, select

from optimize.core.access import check_project, only_visible, visible_projects
from optimize.core.clock import iso, utcnow
from optimize.core.errors import Invalid, NotFound, Refused
from optimize.core.names import check_name
from optimize.jobs.registry import kinds
from optimize.schemas import projects as answers
from optimize.store.db import Store, hold_writes, insert_ignoring_conflict
from optimize.store.events import record
from optimize.store.tables import Namespace, Project, Run

_ID_SHAPED = re.compile(r"[0-9a-f]{8,}")
RESERVED = frozenset({"counts"})


def check_project_name(text: str) -> str:
    name = check_name(text, "project name")
    if _ID_SHAPED.fullmatch(name):
        raise Invalid(f"project name {name!r} looks like an id", hint="choose a name with letters other than a-f")
    if name in RESERVED:
        raise Invalid(f"project name {name!r} is reserved", hint="choose another name")
    return name


def project_view(project: Project, runs: int = 0) -> answers.Project:
    return answers.Project(name=project.name, namespace=project.name, description=project.description,
                           archived=project.archived, created_at=iso(project.created_at), runs=runs,
                           standing_evaluation=standing_view(project))


def standing_view(project: Project) -> answers.StandingEvaluation | None:
    if project.standing_dataset is None:
        return None
    return answers.StandingEvaluation(dataset=project.standing_dataset, grader=project.standing_grader,
                                      grader_instructions=project.standing_grader_instructions,
                                      set_at=iso(project.standing_set_at))


def set_standing(session, project: Project, dataset: str, grader: str, instructions: str | None
                 ) -> answers.StandingEvaluationChange:
    """Hold a standing evaluation (the references checked by the caller): every model version the project registers
    from now on is evaluated by it. Setting the one it holds again changes nothing, so the versions it counts from
    stay the same."""
    wanted = (dataset, grader, instructions)
    held = (project.standing_dataset, project.standing_grader, project.standing_grader_instructions)
    changed = wanted != held
    if changed:
        project.standing_dataset, project.standing_grader, project.standing_grader_instructions = wanted
        project.standing_set_at = utcnow()
        record(session, f"project:{project.name}", "standing-evaluation-set", dataset=dataset, grader=grader)
    return project_view(project, _run_count(session, project.name)).extended(
        answers.StandingEvaluationChange, changed=changed)


def clear_standing(store: Store, name: str) -> answers.StandingEvaluationChange:
    """Stop evaluating the project's new model versions (the evaluations already started are left as they are);
    clearing when none is held changes nothing. An archived project's may be cleared too."""
    with store.transaction() as session:
        project = _locked(session, name)
        changed = project.standing_dataset is not None
        if changed:
            project.standing_dataset = project.standing_grader = project.standing_grader_instructions = None
            project.standing_set_at = None
            record(session, f"project:{project.name}", "standing-evaluation-cleared")
        return project_view(project, _run_count(session, project.name)).extended(
            answers.StandingEvaluationChange, changed=changed)


def create_project(store: Store, name: str, description: str | None = None) -> tuple[answers.Project, bool]:
    """Create a project (idempotent: an existing one is returned); returns (project, created)."""
    name = check_project_name(name)
    check_project(name)
    with store.transaction() as session:
        created = insert_ignoring_conflict(session, Project, {
            "name": name, "description": description, "archived": False, "created_at": utcnow()}, ["name"]) == 1
        project = session.get(Project, name)
        return project_view(project, _run_count(session, name)), created


def find_project(session, name: str) -> Project:
    check_project(name)
    project = session.get(Project, name.lower())
    if project is None:
        raise NotFound(f"training project {name!r} does not exist",
                       hint=f"create it with: akka training projects create {name.lower()}")
    return project


def open_project(session, name: str) -> Project:
    """The project new work goes into, under its lock (`lock_project`); refused when archived.

    The lock is held until the work is stored, so an archive taking the row's exclusive lock either waits for the
    new work and then sees it, or commits first and the submission sees the project archived; and the project's
    quotas are counted by one submission at a time."""
    check_project(name)
    project = lock_project(session, name)
    if project is None:
        project = find_project(session, name)  # raises NotFound with its hint
    if project.archived:
        raise Refused(f"training project {project.name!r} is archived and takes no new work",
                      hint=f"akka training projects unarchive {project.name}")
    return project


def lock_project(session, name: str) -> Project | None:
    """The project's row (None when there is none), locked until the transaction ends: every transaction that
    checks the project's quotas before storing new work takes it first, so they count and insert one at a time.

    On PostgreSQL the row is read FOR NO KEY UPDATE: exclusive among submissions and against an archive's FOR
    UPDATE, while rows that merely reference the project (a run, an evaluation) can still be inserted beside it.
    On SQLite the transaction becomes the database's one writer (`hold_writes`)."""
    hold_writes(session)
    return session.get(Project, name.lower(), with_for_update={"key_share": True}, populate_existing=True)


def get_project(store: Store, name: str) -> answers.Project:
    with store.transaction() as session:
        project = find_project(session, name)
        return project_view(project, _run_count(session, project.name))


def project_for_model(session, reference: str, owner: str | None, asked: str | None, work: str) -> Project:
    """The open project work over a model counts for: a registered model's own (another one named is refused), or
    the one named for a base model, which belongs to none."""
    name = asked or owner
    if name is None:
        raise Invalid(f"{reference} is a base model, which belongs to no project: say which project the {work} "
                      "counts for", hint="pass --project NAME")
    if owner is not None and asked and asked.lower() != owner:
        raise Refused(f"model {reference} belongs to project {owner}, not {asked}",
                      hint=f"leave --project out, or pass --project {owner}")
    return open_project(session, name)


def project_work(table, project: str | None, include_archived: bool):
    """The query listing one kind of a project's work (runs, evaluations, endpoints), newest first, with whether
    its project is archived: one project's when it is named (archived or not), else every open project's, and
    every project's with `include_archived`."""
    query = select(table, Project.archived).join(Project, Project.name == table.project) \
        .order_by(table.created_at.desc())
    if project:
        check_project(project)
        return query.where(table.project == project.lower())
    query = only_visible(query, visible_projects(table.project))
    return query if include_archived else query.where(Project.archived.is_(False))


def list_projects(store: Store, include_archived: bool = False) -> list[answers.Project]:
    with store.transaction() as session:
        query = only_visible(select(Project).order_by(Project.created_at.desc()), visible_projects(Project.name))
        if not include_archived:
            query = query.where(Project.archived.is_(False))
        counts = dict(session.execute(select(Run.project, func.count()).group_by(Run.project)).all())
        return [project_view(p, counts.get(p.name, 0)) for p in session.scalars(query)]


def archive_project(store: Store, name: str) -> answers.ProjectChange:
    """Archive a project: its lists leave it out and it takes no new work. Refused while any of its work is still in
    progress, naming each item. Archiving twice changes nothing and says so in `changed`."""
    with store.transaction() as session:
        project = _locked(session, name)
        if not project.archived:
            busy = work_in_progress(session, project.name)
            if busy:
                raise Refused(
                    f"training project {project.name!r} has work in progress: {', '.join(busy)}; "
                    "it cannot be archived",
                    hint="cancel them (akka training runs cancel RUN) or let them finish, then archive it again",
                    inProgress=busy)
        return _set_archived(session, project, True)


def unarchive_project(store: Store, name: str) -> answers.ProjectChange:
    """Restore an archived project to lists and new work; unarchiving an open one changes nothing."""
    with store.transaction() as session:
        return _set_archived(session, _locked(session, name), False)


def work_in_progress(session, name: str) -> list[str]:
    """Every unfinished item of the project, described as `kind id (PHASE)`: per kind of work, its items in a phase
    its lifecycle does not count as terminal, in the order the kinds were registered with the kernel (the kinds'
    services build on projects, so projects knows them only by their declarations); a kind counts here when it
    declares `project_work`."""
    items = []
    for kind in kinds():
        if not kind.project_work:
            continue
        lifecycle = kind.lifecycle
        table, phase = lifecycle.table, getattr(lifecycle.table, lifecycle.column)
        unfinished = [p.value for p in lifecycle.phases if p not in lifecycle.terminal]
        query = (select(table.id, phase).where(table.project == name, phase.in_(unfinished))
                 .order_by(table.created_at, table.id))
        items += [f"{lifecycle.kind} {item_id[:12]} ({value})" for item_id, value in session.execute(query)]
    return items


def _locked(session, name: str) -> Project:
    """The project row under an exclusive lock, so no submission slips in between the check and the change (on
    SQLite, the database's write lock)."""
    check_project(name)
    hold_writes(session)
    project = session.get(Project, name.lower(), with_for_update=True)
    return project if project is not None else find_project(session, name)


def _set_archived(session, project: Project, archived: bool) -> answers.ProjectChange:
    changed = project.archived != archived
    if changed:
        project.archived = archived
        record(session, f"project:{project.name}", "archived" if archived else "unarchived")
    return project_view(project, _run_count(session, project.name)).extended(
        answers.ProjectChange, changed=changed, registry_namespace=registry_namespace(session, project.name))


def registry_namespace(session, name: str) -> answers.RegistryNamespaceState:
    """The state of the registry namespace named like the project: archiving one leaves the other as it is."""
    namespace = session.get(Namespace, name)
    return answers.RegistryNamespaceState(name=name, exists=namespace is not None,
                                          archived=bool(namespace and namespace.archived))


def _run_count(session, name: str) -> int:
    return session.scalar(select(func.count()).select_from(Run).where(Run.project == name)) or 0


__all__ = ["archive_project", "check_project_name", "clear_standing", "create_project", "find_project",
           "get_project", "list_projects", "lock_project", "open_project", "registry_namespace", "set_standing",
           "standing_view", "unarchive_project", "work_in_progress"]
