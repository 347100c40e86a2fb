"""`akka training projects create|get|list|archive|unarchive|scores|set-evaluation`: a project's name is the
registry namespace of its models; its standing evaluation is what every model version it registers is evaluated
on, by the server."""

from __future__ import annotations

from typing import Annotated

import typer

from optimize.cli.common import client_for, command
from optimize.cli.output import Output
from optimize.cli.render import DASH, age, footer, table

app = typer.Typer(help="Training projects: where runs and their models belong.", no_args_is_help=True)


@command(app, "create")
def create(out: Output, name: Annotated[str, typer.Argument(help="Project name (also its models' namespace).")],
           description: Annotated[str | None, typer.Option("--description", help="Free text.")] = None) -> None:
    """Create a project (an existing one is shown as it is)."""
    with client_for(out) as api:
        project = api.projects.create(name, description=description)
    out.emit(project, lambda con, p: con.print(
        f"Project {p['name']}: its models register under the namespace {p['namespace']}/"))


@command(app, "get")
def get(out: Output, name: Annotated[str, typer.Argument(help="Project name.")]) -> None:
    """Show a project."""
    with client_for(out) as api:
        out.emit(api.projects.get(name), _render_one)


@command(app, "list")
def list_projects(out: Output, archived: Annotated[bool, typer.Option("--archived", help="Include archived.")] = False
                  ) -> None:
    """List projects, newest first."""
    with client_for(out) as api:
        out.emit(api.projects.list(archived=archived), _render_list)


@command(app, "archive")
def archive(out: Output, name: Annotated[str, typer.Argument(help="Project name.")]) -> None:
    """Archive a project: lists leave it and its runs out, it takes no new work; refused while work is in progress."""
    with client_for(out) as api:
        out.emit(api.projects.archive(name), _render_archived)


@command(app, "unarchive")
def unarchive(out: Output, name: Annotated[str, typer.Argument(help="Project name.")]) -> None:
    """Restore an archived project to lists and new work."""
    with client_for(out) as api:
        out.emit(api.projects.unarchive(name), _render_unarchived)


@command(app, "scores")
def scores(
    out: Output,
    name: Annotated[str, typer.Argument(help="Project name.")],
    dataset: Annotated[str | None, typer.Option("--dataset", help="Another dataset's scores (a reference prefix).")
                       ] = None,
    grader: Annotated[str | None, typer.Option("--grader", help="Another grader's scores.")] = None,
) -> None:
    """The base model's score and one column per training configuration, for one dataset and grader."""
    with client_for(out) as api:
        out.emit(api.projects.scores(name, dataset=dataset, grader=grader), _render_scores)


@command(app, "set-evaluation")
def set_evaluation(
    out: Output,
    name: Annotated[str, typer.Argument(help="Project name.")],
    dataset: Annotated[str | None, typer.Option(
        "--dataset", help="The registered chat dataset every new model version is evaluated on, NS/NAME (resolved "
                          "when each evaluation starts) or NS/NAME:vN (pinned).")] = None,
    grader: Annotated[str | None, typer.Option(
        "--grader", help="json-label-match (default), exact, contains, regex:PATTERN, numeric[:TOLERANCE], http:URL, "
                         "model:REF or bundle:NS/NAME[:vN|:ALIAS]#MODULE[:FUNCTION], as evaluations start takes it."
    )] = None,
    grader_instructions: Annotated[str | None, typer.Option(
        "--grader-instructions", help="Instructions for a judge model's grader (model:REF only).")] = None,
    clear: Annotated[bool, typer.Option("--clear", help="Remove the standing evaluation (those started stay).")
                     ] = False,
) -> None:
    """Set the project's standing evaluation: every model version it registers from now on (runs, snapshots
    registered, adapters imported) is evaluated on the dataset with the grader, started by the server, and its
    held-out score shows in akka registry models versions."""
    if clear:
        if dataset or grader or grader_instructions:
            raise typer.BadParameter("--clear takes no --dataset, --grader or --grader-instructions",
                                     param_hint="'--clear'")
        with client_for(out) as api:
            out.emit(api.projects.clear_evaluation(name), _render_cleared)
        return
    if not dataset:
        raise typer.BadParameter("name the held-out chat dataset new versions are evaluated on (or pass --clear)",
                                 param_hint="'--dataset'")
    with client_for(out) as api:
        out.emit(api.projects.set_evaluation(name, dataset=dataset, grader=grader,
                                             grader_instructions=grader_instructions), _render_standing_set)


def _render_standing_set(con, p) -> None:
    standing = p["standingEvaluation"]
    verb = "now evaluates" if p["changed"] else "already evaluates"
    con.print(f"Project {p['name']} {verb} every model version it registers on {standing['dataset']} with "
              f"{standing['grader']} (set {age(standing['setAt'])}).")
    con.print(f"Scores show in: akka registry models versions {p['name']}/MODEL")


def _render_cleared(con, p) -> None:
    if p["changed"]:
        con.print(f"Project {p['name']} no longer evaluates new model versions by itself; the evaluations started "
                  "stay.")
    else:
        con.print(f"Project {p['name']} has no standing evaluation.")


def _render_scores(con, data) -> None:
    if not data["groups"]:
        con.print(f"No completed evaluation in project {data['project']} yet; start one with: akka training "
                  "evaluations start --model MODEL --dataset REF --project " + data["project"])
        return
    con.print(f"Scores of project {data['project']} on {data['dataset']} with {data['grader']}")
    for group in data["groups"]:
        grid = table("COLUMN", "MODEL", "MEAN SCORE", "EVALUATION")
        cells = ([("baseline", group["baseline"])] if group["baseline"] else []) + [
            (c["configuration"], c) for c in group["columns"]]
        for column, cell in cells:
            score = DASH if cell["meanScore"] is None else f"{cell['meanScore']:.3f}"
            grid.add_row(column, cell["model"], score, cell["evaluationId"][:12])
        con.print(f"Base model {group['baseModel']} at {group['baseCommit'][:12]}")
        con.print(grid)


def _render_archived(con, p) -> None:
    name = p["name"]
    con.print(f"Project {name} {'archived' if p['changed'] else 'was already archived'}. {_namespace_note(p)}")
    con.print(f"Lists leave it and its runs out unless --archived; unarchive it with: "
              f"akka training projects unarchive {name}")


def _namespace_note(p) -> str:
    """The registry namespace of the same name is separate state: say whether it stays open, and how to close it."""
    name, space = p["name"], p["registryNamespace"]
    if space["archived"]:
        return f"Its registry namespace {name}/ is archived too."
    if space["exists"]:
        return (f"Its registry namespace {name}/ stays open: its models resolve and new versions can still register "
                f"there; archive it too with: akka registry namespaces archive {name}")
    return f"It has no registry namespace {name}/ yet (one is created by the first registration into it)."


def _render_unarchived(con, p) -> None:
    name = p["name"]
    con.print(f"Project {name} {'unarchived; it takes new work again' if p['changed'] else 'was not archived'}.")
    if p["registryNamespace"]["archived"]:  # runs would still be refused: they register there
        con.print(f"Its registry namespace {name}/ is still archived, so runs that register there are refused; "
                  f"unarchive it with: akka registry namespaces unarchive {name}")


def _render_one(con, p) -> None:
    con.print(f"[bold]Project[/]     {p['name']}{' (archived)' if p['archived'] else ''}")
    con.print(f"Namespace   {p['namespace']}")
    con.print(f"Description {p['description'] or DASH}")
    con.print(f"Runs        {p['runs']}")
    con.print(f"Created     {age(p['createdAt'])}")
    standing = p.get("standingEvaluation")
    if standing:
        instructions = " (with instructions)" if standing["graderInstructions"] else ""
        con.print(f"Evaluation  every new model version on {standing['dataset']} with {standing['grader']}"
                  f"{instructions} (set {age(standing['setAt'])})")
    else:
        con.print(f"Evaluation  {DASH} (set one with: akka training projects set-evaluation {p['name']} "
                  "--dataset NS/NAME)")


def _render_list(con, data) -> None:
    grid = table("NAME", "RUNS", "DESCRIPTION", "CREATED")
    for p in data["projects"]:
        grid.add_row(p["name"] + (" (archived)" if p["archived"] else ""), str(p["runs"]), p["description"] or DASH,
                     age(p["createdAt"]))
    con.print(grid)
    con.print(footer(len(data["projects"]), "project"))
