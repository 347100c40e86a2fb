"""`akka training projects create|get|list`: a project's name is the registry namespace of its models."""

from __future__ import annotations

from typing import Annotated

import typer

from optimize.cli.common import client_for, command
from optimize.cli.output import Output
from optimize.cli.render import DASH, age, footer, table
from optimize.client.http import segment

app = typer.Typer(help="Training projects: where runs and their models belong.", no_args_is_help=True)


@command(app, "create")
def create(out: Output, name: Annotated[str, typer.Argument(help="Project name (also its models' namespace).")],
           description: Annotated[str | None, typer.Option("--description", help="Free text.")] = None) -> None:
    """Create a project (an existing one is shown as it is)."""
    with client_for(out) as client:
        project = client.post("/v1/training/projects", json={"name": name, "description": description})
    out.emit(project, lambda con, p: con.print(
        f"Project {p['name']}: its models register under the namespace {p['namespace']}/"))


@command(app, "get")
def get(out: Output, name: Annotated[str, typer.Argument(help="Project name.")]) -> None:
    """Show a project."""
    with client_for(out) as client:
        out.emit(client.get(f"/v1/training/projects/{segment(name)}"), _render_one)


@command(app, "list")
def list_projects(out: Output, archived: Annotated[bool, typer.Option("--archived", help="Include archived.")] = False
                  ) -> None:
    """List projects, newest first."""
    with client_for(out) as client:
        out.emit(client.get("/v1/training/projects", params={"archived": archived}), _render_list)


def _render_one(con, p) -> None:
    con.print(f"[bold]Project[/]     {p['name']}{' (archived)' if p['archived'] else ''}")
    con.print(f"Namespace   {p['namespace']}")
    con.print(f"Description {p['description'] or DASH}")
    con.print(f"Runs        {p['runs']}")
    con.print(f"Created     {age(p['createdAt'])}")


def _render_list(con, data) -> None:
    grid = table("NAME", "RUNS", "DESCRIPTION", "CREATED")
    for p in data["projects"]:
        grid.add_row(p["name"] + (" (archived)" if p["archived"] else ""), str(p["runs"]), p["description"] or DASH,
                     age(p["createdAt"]))
    con.print(grid)
    con.print(footer(len(data["projects"]), "project"))
