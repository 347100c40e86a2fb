"""`akka registry namespaces list|get|annotate|archive|unarchive`."""

from __future__ import annotations

from typing import Annotated

import typer

from optimize.cli.common import client_for, command
from optimize.cli.output import Output
from optimize.cli.render import DASH, age, footer, table

app = typer.Typer(help="Registry namespaces (created by the first registration into them).", no_args_is_help=True)


@command(app, "list")
def list_namespaces(
    out: Output,
    archived: Annotated[bool, typer.Option("--archived", help="Include archived namespaces.")] = False,
) -> None:
    """List namespaces (archived ones only with --archived)."""
    with client_for(out) as api:
        data = api.namespaces.list(archived=archived)
    out.emit(data, _render_list)


@command(app, "get")
def get_namespace(out: Output, namespace: Annotated[str, typer.Argument(help="Namespace name.")]) -> None:
    """Show one namespace, archived or not."""
    with client_for(out) as api:
        out.emit(api.namespaces.get(namespace), _render_one)


@command(app, "annotate")
def annotate(
    out: Output,
    namespace: Annotated[str, typer.Argument(help="Namespace name.")],
    description: Annotated[str, typer.Option("--description", help="New description; empty clears it.")],
) -> None:
    """Set or clear a namespace's description."""
    with client_for(out) as api:
        out.emit(api.namespaces.annotate(namespace, description=description), _render_one)


@command(app, "archive")
def archive(out: Output, namespace: Annotated[str, typer.Argument(help="Namespace name.")]) -> None:
    """Archive a namespace: hidden from lists, references still resolve, new versions refused."""
    with client_for(out) as api:
        data = api.namespaces.archive(namespace)
    out.emit(data, lambda con, d: con.print(
        f"Namespace {d['name']} {'archived' if d['changed'] else 'was already archived'}. "
        f"Lists leave it out unless --archived; unarchive it with: akka registry namespaces unarchive {d['name']}"))


@command(app, "unarchive")
def unarchive(out: Output, namespace: Annotated[str, typer.Argument(help="Namespace name.")]) -> None:
    """Restore an archived namespace."""
    with client_for(out) as api:
        data = api.namespaces.unarchive(namespace)
    out.emit(data, lambda con, d: con.print(
        f"Namespace {d['name']} {'unarchived' if d['changed'] else 'was not archived'}."))


def _render_list(con, data) -> None:
    grid = table("NAMESPACE", "DATASETS", "MODELS", "DESCRIPTION", "CREATED")
    for item in data["namespaces"]:
        name = item["name"] + (" (archived)" if item["archived"] else "")
        grid.add_row(name, str(item["datasets"]), str(item["models"]), item["description"] or DASH,
                     age(item["createdAt"]))
    con.print(grid)
    con.print(footer(len(data["namespaces"]), "namespace"))


def _render_one(con, item) -> None:
    con.print(f"[bold]Namespace[/]    {item['name']}")
    con.print(f"Description  {item['description'] or DASH}")
    con.print(f"Datasets     {item['datasets']}")
    con.print(f"Models       {item['models']}")
    con.print(f"State        {'archived ' + age(item['archivedAt']) if item['archived'] else 'active'}")
    con.print(f"Created      {age(item['createdAt'])}")
