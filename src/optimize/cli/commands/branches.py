"""`akka training runs branch|continue|sweep|branches|tree|ancestry`: child runs from a parent's snapshot.

The commands join the `runs` group (imported for that by `training`)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from optimize.cli.commands.runs import _follow, app
from optimize.cli.common import client_for, command, fail
from optimize.cli.dry_run import render_dry_run
from optimize.cli.follow import Events, check_events
from optimize.cli.output import Output
from optimize.cli.render import DASH, age, table

if TYPE_CHECKING:
    from optimize.client.api import Json, Runs

Parent = Annotated[str, typer.Argument(help="Parent run id or prefix.")]
SnapshotOption = Annotated[str | None, typer.Option("--snapshot", help="Snapshot id (default: the newest that "
                                                    "holds what the branch restores).")]
Overrides = Annotated[str | None, typer.Option("--overrides", help="Partial config document (YAML or JSON); - "
                                               "reads stdin.")]
Restore = Annotated[str, typer.Option("--restore", help="auto (default), weights or trainingState.")]
DryRun = Annotated[bool, typer.Option("--dry-run", help="Check everything; start nothing.")]
Wait = Annotated[bool, typer.Option("--wait", help="Follow the child until it ends.")]
ExitStatus = Annotated[bool, typer.Option("--exit-status", help="With --wait: exit 1 unless it completes.")]


def _document(path: str | None, what: str) -> Any:
    if path is None:
        return None
    from optimize.schemas.plans import load_plan_text

    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as error:
        fail(f"cannot read {path}: {error.strerror}")
    try:
        return load_plan_text(text)
    except Exception as error:  # noqa: BLE001 - the refusal names the file
        fail(f"the {what} file {path} is not valid: {getattr(error, 'message', error)}")


def _submit(out: Output, submit: Callable[[Runs], Json], dry_run: bool, wait: bool,
            exit_status: bool, events: bool) -> None:
    """`submit` sends the child (a branch or a continuation) through the runs resource it is given."""
    if exit_status and not wait:
        raise typer.BadParameter("--exit-status needs --wait", param_hint="'--exit-status'")
    check_events(out, events, wait)
    with client_for(out, timeout=120.0) as api:
        answer = submit(api.runs)
        if dry_run:
            out.emit(answer, _render_dry_branch)
            return
        if not wait:
            out.emit(answer, lambda con, r: con.print(
                f"Branch {r['runId'][:12]} of run {r['branch']['parentRunId'][:12]} {r['phase'].title()}; "
                f"{_restore_text(r['branch'])}. Follow it with: akka training runs wait {r['runId'][:12]}"))
            return
        out.note(f"Branch {answer['runId'][:12]} submitted; {_restore_text(answer['branch'])}.")
        _follow(api, out, answer["runId"], None, exit_status, events)


def _restore_text(branch: dict[str, Any]) -> str:
    return (f"restores {branch['restore']} from snapshot {branch['snapshotId'][:12]} at step {branch['step']} "
            f"({branch['why']})")


def _render_dry_branch(con, d: dict[str, Any]) -> None:
    con.print(f"Restore      {_restore_text(d['branch'])}")
    render_dry_run(con, d, False)


@command(app, "branch")
def branch(out: Output, parent: Parent, snapshot: SnapshotOption = None, restore: Restore = "auto",
           overrides: Overrides = None,
           max_steps: Annotated[int | None, typer.Option("--max-steps", min=1, help="The child's updates.")] = None,
           epochs: Annotated[int | None, typer.Option("--epochs", min=1, help="The child's epochs.")] = None,
           dry_run: DryRun = False, wait: Wait = False, exit_status: ExitStatus = False, events: Events = False
           ) -> None:
    """Start a child run from a parent's snapshot, with the parent's settings and the overrides over them."""
    document = _document(overrides, "overrides")
    _submit(out, lambda runs: runs.branch(parent, snapshot_id=snapshot, restore_mode=restore, overrides=document,
                                          max_steps=max_steps, epochs=epochs, dry_run=dry_run),
            dry_run, wait, exit_status, events)


@command(app, "continue")
def continue_run(out: Output, parent: Parent,
                 steps: Annotated[int, typer.Option("--steps", min=1, help="How many more updates.")],
                 snapshot: SnapshotOption = None, overrides: Overrides = None, dry_run: DryRun = False,
                 wait: Wait = False, exit_status: ExitStatus = False, events: Events = False) -> None:
    """Continue a run with its optimizer state: a trainingState branch of --steps updates."""
    document = _document(overrides, "overrides")
    _submit(out, lambda runs: runs.continue_(parent, steps=steps, snapshot_id=snapshot, overrides=document,
                                             dry_run=dry_run),
            dry_run, wait, exit_status, events)


@command(app, "sweep")
def sweep(out: Output, parent: Parent,
          grid: Annotated[str, typer.Option("--grid", help="Grid document: axes of path and values.")],
          snapshot: SnapshotOption = None, restore: Restore = "auto", dry_run: DryRun = False) -> None:
    """One branch per point of the grid's cartesian product; every point is checked before any starts."""
    document = _document(grid, "grid")
    with client_for(out, timeout=300.0) as api:
        answer = api.runs.sweep(parent, grid=document, snapshot_id=snapshot, restore_mode=restore, dry_run=dry_run)
    out.emit(answer, _render_sweep)


def _render_sweep(con, d: dict[str, Any]) -> None:
    grid = table("POINT", "OVERRIDES", "RESTORE", "RUN")
    items = d.get("points") or d.get("runs") or []
    for number, item in enumerate(items, 1):
        restore = item["restore"] if "restore" in item else item["branch"]["restore"]
        grid.add_row(str(number), _flat(item["overrides"]), restore, item.get("runId", DASH)[:12])
    con.print(grid)
    con.print(f"Dry run: {len(items)} point(s) checked, nothing started." if d.get("dryRun")
              else f"{len(items)} branch(es) submitted.")


def _flat(document: dict[str, Any], prefix: str = "") -> str:
    parts = []
    for key, value in document.items():
        if isinstance(value, dict):
            parts.append(_flat(value, f"{prefix}{key}."))
        else:
            parts.append(f"{prefix}{key}={value}")
    return ", ".join(parts)


@command(app, "branches")
def branches(out: Output, run: Parent) -> None:
    """The run's direct children."""
    with client_for(out) as api:
        out.emit(api.runs.branches(run), _render_children)


@command(app, "tree")
def tree(out: Output, run: Parent) -> None:
    """Every descendant of the run."""
    with client_for(out) as api:
        out.emit(api.runs.branches(run, recursive=True), _render_children)


def _render_children(con, d: dict[str, Any]) -> None:
    grid = table("RUN", "PARENT", "FROM STEP", "RESTORE", "PHASE", "MODEL", "CREATED")
    for r in d["runs"]:
        b = r["branch"]
        grid.add_row("  " * (r["depth"] - 1) + r["runId"][:12], b["parentRunId"][:12], str(b["step"]), b["restore"],
                     r["phase"].title(), r["results"].get("model") or DASH, age(r["timing"]["createdAt"]))
    con.print(grid)
    count = len(d["runs"])
    con.print(f"{count} branch{'' if count == 1 else 'es'}.")


@command(app, "ancestry")
def ancestry(out: Output, run: Parent) -> None:
    """The chain from the root run to this one: each hop's source snapshot, its step and the hop's updates."""
    with client_for(out) as api:
        out.emit(api.runs.ancestry(run), _render_ancestry)


def _render_ancestry(con, d: dict[str, Any]) -> None:
    for number, hop in enumerate(d["chain"]):
        source = (f" ← snapshot {hop['snapshotId'][:12]} at step {hop['fromStep']} ({hop['restore']})"
                  if hop.get("snapshotId") else f" (root, from the weights of {hop['source']})" if hop.get("source")
                  else " (root)")
        steps = f", {hop['steps']} updates" if hop.get("steps") else ""
        con.print(f"{'  ' * number}{hop['runId'][:12]} {hop['method']} {hop['phase'].title()}{steps}{source}")
