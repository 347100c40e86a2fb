"""`akka training snapshots get|register|pin|unpin SNAPSHOT`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from optimize.cli.common import client_for, command
from optimize.cli.output import Output
from optimize.cli.render import DASH, age

if TYPE_CHECKING:
    from optimize.client.api import Json, Snapshots

app = typer.Typer(help="Snapshots: committed saves of runs; register their weights, pin them.", no_args_is_help=True)
Snapshot = Annotated[str, typer.Argument(help="Snapshot id or unambiguous prefix.")]
Kinds = Annotated[list[str] | None, typer.Option("--kind", help="weights or trainingState (repeatable); default both.")]


@command(app, "get")
def get(out: Output, snapshot: Snapshot) -> None:
    """Show a snapshot: its run, step, kinds, holds and registrations."""
    with client_for(out) as api:
        out.emit(api.snapshots.get(snapshot), _render)


@command(app, "register")
def register(out: Output, snapshot: Snapshot,
             name: Annotated[str | None, typer.Option("--name", help="Model name (default: the run's).")] = None
             ) -> None:
    """Register the snapshot's adapter weights as a model version in its project (the same weights: the same
    version)."""
    with client_for(out) as api:
        answer = api.snapshots.register(snapshot, name=name)
    out.emit(answer, lambda con, s: con.print(f"Snapshot {s['snapshotId'][:12]} (step {s['step']}) registered as "
                                              f"{s['model']}"))


@command(app, "pin")
def pin(out: Output, snapshot: Snapshot, kind: Kinds = None) -> None:
    """Hold a snapshot's kinds against retention (execution.keepAdapters, keepTrainingStates)."""
    _pin(out, lambda snapshots: snapshots.pin(snapshot, kinds=kind))


@command(app, "unpin")
def unpin(out: Output, snapshot: Snapshot, kind: Kinds = None) -> None:
    """Release a pin; retention applies to the snapshot again."""
    _pin(out, lambda snapshots: snapshots.unpin(snapshot, kinds=kind))


def _pin(out: Output, call: Callable[[Snapshots], Json]) -> None:
    """Both verbs answer the snapshot with what stays pinned; `call` is one of them on the snapshots resource."""
    with client_for(out) as api:
        answer = call(api.snapshots)
    out.emit(answer, lambda con, s: con.print(
        f"Snapshot {s['snapshotId'][:12]} pinned: {', '.join(s['pinned']) or DASH}"))


def _render(con, s: dict[str, Any]) -> None:
    con.print(f"[bold]Snapshot[/]    {s['snapshotId']}")
    con.print(f"Run         {s['runId']} (attempt {s['attempt']}) in project {s['project']}")
    con.print(f"Step        {s['step']}{' (final)' if s['final'] else ''}")
    con.print(f"Kinds       {', '.join(s['kinds']) or DASH}")
    if s["swept"]:
        con.print(f"Swept       {', '.join(s['swept'])} (retention)")
    con.print(f"Held by     {'; '.join(s['heldBy']) or DASH}")
    con.print(f"Models      {', '.join(s['registered']) or DASH}")
    con.print(f"Committed   {age(s['committedAt'])}")
