"""`akka training …`: base models and capacity (runs, analyses, evaluations come with their features)."""

from __future__ import annotations

from typing import Annotated

import typer

from optimize.cli.commands import projects, sessions
from optimize.cli.common import client_for, command
from optimize.cli.kinds import groups
from optimize.cli.output import Output
from optimize.cli.quota_view import render_quotas
from optimize.cli.render import DASH, age, footer, table

app = typer.Typer(help="Training: projects, runs, base models, dataset analyses, capacity.", no_args_is_help=True)
base_models = typer.Typer(help="The base-model catalog this deployment applies.", no_args_is_help=True)
app.add_typer(base_models, name="base-models")
app.add_typer(projects.app, name="projects")
app.add_typer(sessions.app, name="sessions")
for group in groups():  # each job kind's groups, from the CLI's table of kinds
    app.add_typer(group.commands, name=group.name, hidden=group.hidden)


@command(base_models, "list")
def list_models(out: Output) -> None:
    """List the catalog's base models with their status."""
    with client_for(out) as api:
        out.emit(api.base_models.list(), _render_list)


@command(base_models, "get")
def get_model(out: Output,
              model: Annotated[str, typer.Argument(help="Entry id, repository or unambiguous prefix.")]) -> None:
    """Show one base model: commit, parameters, what it is allowed for, envelopes (measurements)."""
    with client_for(out) as api:
        out.emit(api.base_models.get(model), _render_one)


@command(base_models, "select")
def select_model(
    out: Output,
    model: Annotated[str, typer.Argument(help="Entry id, repository or unambiguous prefix.")],
    from_dir: Annotated[str | None, typer.Option("--from", help="Import this local snapshot folder instead.")] = None,
    revision: Annotated[str | None, typer.Option(
        "--revision", help="Hub branch, tag or commit to fetch where the catalog pins no commit (default: main); "
                           "resolved once and recorded.")] = None,
) -> None:
    """Make a base model available: build a stand-in, import a snapshot, or fetch it from the hub (at its pinned
    commit, else at the commit --revision names now)."""
    from pathlib import Path

    out.note(f"Selecting {model} …")
    from optimize.cli.download_view import select_showing_download

    with client_for(out, timeout=900.0) as api:  # building or fetching takes a while
        # the server reads the folder, so it gets the path as this shell means it: absolute
        data = select_showing_download(api, out, model, revision=revision,
                                       from_dir=str(Path(from_dir).resolve()) if from_dir else None)
    out.emit(data, _render_selected)


@command(base_models, "add")
def add_model(
    out: Output,
    repository: Annotated[str, typer.Argument(help="Hub repository OWNER/NAME, optionally @REVISION (default main).")],
    family: Annotated[str | None, typer.Option(
        "--family", help="Model family where the architecture fits several (LlamaForCausalLM: llama3.2 or smollm2).")]
    = None,
) -> None:
    """Add a hub model to this deployment's catalog (administrators), pinned to the commit its revision names now,
    with parameters, context length and template digest read from its files."""
    out.note(f"Reading {repository} from the hub …")
    with client_for(out, timeout=300.0) as api:
        data = api.base_models.add(repository, family=family)
    out.emit(data, _render_added)


def _render_selected(con, d) -> None:
    chosen = d["selection"]
    how = chosen["source"]
    if chosen["source"] == "hub" and d["catalogCommit"] is None:  # resolved here: say from what
        how += f"; {chosen['revision'] or 'main'} resolved to {d['commit']} and recorded"
    con.print(f"Selected {d['id']} at {d['commit'][:12]} ({how}); cached in {chosen['path']}")
    if chosen["parameters"] is not None:
        con.print(f"Parameters   {_params(chosen['parameters'])}, counted in the selected files")


def _render_added(con, d) -> None:
    con.print(f"Added {d['id']} ({d['family']}, {d['architecture'].get('class')}) at {d['commit']}")
    con.print(f"Parameters   {_params(d['parameters']['total'])}; context {d['contextLength'] or DASH}; "
              f"template sha256 {(d['chatTemplateSha256'] or DASH)[:12]}")
    con.print(f"Select it with: akka training base-models select {d['id']}")


@command(app, "capacity")
def capacity(out: Output, project: Annotated[str | None, typer.Option(
        "--project", help="Only this project's claims and quota.")] = None) -> None:
    """Device pools, devices, claims, and each training project's quota and what it uses."""
    with client_for(out) as api:
        out.emit(api.capacity(project), _render_capacity)


def _params(value: int | None) -> str:
    if value is None:
        return DASH
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if value >= size:
            return f"{value / size:.1f}{unit}"
    return str(value)


def _render_list(con, data) -> None:
    grid = table("ID", "REPOSITORY", "COMMIT", "PARAMETERS", "CONTEXT", "ALLOWED FOR", "STATUS")
    for m in data["models"]:
        grid.add_row(m["id"], m["repository"], (m["commit"] or DASH)[:12], _params(m["parameters"]["total"]),
                     str(m["contextLength"] or DASH), ", ".join(m["allowedFor"]), m["status"])
    con.print(grid)
    con.print(footer(len(data["models"]), "base model") + f" Envelopes are {data['envelopes']}.")


def _render_one(con, m) -> None:
    params = m["parameters"]
    con.print(f"[bold]Base model[/]   {m['id']}")
    con.print(f"Repository   {m['repository']} at {m['commit'] or 'no pinned commit'}")
    if m["commitNote"]:
        con.print(f"             ({m['commitNote']})")
    con.print(f"Family       {m['family']}")
    counted = " (counted in the selected files)" if params.get("source") == "files" else ""
    con.print(f"Parameters   {_params(params['total'])} total, {_params(params['active'])} active{counted}")
    con.print(f"Context      {m['contextLength'] or DASH}")
    if m["servingOnly"]:
        con.print(f"Allowed for  serving only (served on {', '.join(m['servedOn']) or DASH})")
    else:
        con.print(f"Allowed for  {' and '.join(m['allowedFor'])}")
    con.print(f"Served on    {', '.join(m['servedOn']) or DASH}; tool calls parsed by {m['toolCallParser'] or DASH}")
    con.print(f"Template     {m['chatTemplate']}" + (f" (sha256 {m['chatTemplateSha256'][:12]})"
                                                     if m.get("chatTemplateSha256") else ""))
    if m.get("addedAt"):
        con.print(f"Added        {m['addedAt']} with base-models add")
    chosen = m["selection"]
    con.print(f"Status       {m['status']}" + (f" ({', '.join(filter(None, (chosen['source'], chosen['path'])))})"
                                                  if chosen else ""))
    if m["notes"]:
        con.print(f"Notes        {m['notes']}")
    if not m["envelopes"]:
        con.print("Measured training envelopes: none recorded")
        return
    con.print("Measured training envelopes (measurements):")
    grid = table("METHOD", "ENGINE", "PRECISION", "PROFILE", "GPUS", "LONGEST SEQ", "GPU MEM/DEVICE", "HOST MEM",
                 "MEASURED")
    for e in m["envelopes"]:
        gpu = f"{e['gpuMemoryPerDeviceGiB']} GiB" if e["gpuMemoryPerDeviceGiB"] is not None else DASH
        measured = f"{e['measurement']['by']}, {e['measurement']['at']}, {e['measurement']['hardware']}"
        grid.add_row(e["method"], e["engine"], e["precision"], e["deviceProfile"], str(e["gpus"]),
                     str(e["longestSequence"]), gpu, f"{e['hostMemoryGiB']} GiB", measured)
    con.print(grid)


def _render_capacity(con, data) -> None:
    con.print("[bold]Pools[/]")
    cluster = data.get("nodes") is not None  # on a cluster, what its live nodes offer now
    grid = table("POOL", "PROFILE", "ACCELERATOR", "FREE", "GRANTED", "DECLARED", *(("ONLINE",) if cluster else ()),
                 "QUEUED")
    for p in data["pools"]:
        grid.add_row(p["pool"], p["profile"], p["accelerator"] or p["kind"], str(p["free"]), str(p["granted"]),
                     str(p["declared"]), *((str(p["online"]),) if cluster else ()), str(p["queued"]))
    con.print(grid)
    if data.get("nodes") is not None:
        con.print(f"[bold]Nodes[/] ({data['executor']} executor)")
        nodes = table("NODE", "ADDRESS", "STATE", "PROFILES", "GPUS")
        for n in data["nodes"]:
            nodes.add_row(n["node"][:12], n["address"] or DASH, "alive" if n["alive"] else "gone",
                          ", ".join(f"{name} x{count}" for name, count in n["profiles"].items()) or DASH,
                          str(n["gpus"]))
        con.print(nodes)
    if data["claims"]:
        con.print("[bold]Claims[/]")
        claims = table("KIND", "FOR", "PROJECT", "PROFILE", "DEVICES", "STATE", "SINCE")
        for c in data["claims"]:
            claims.add_row(c["kind"], c["for"][:12], c["project"] or DASH, c["profile"],
                           ", ".join(c["devices"]) or str(c.get("count", DASH)), c["state"], age(c["since"]))
        con.print(claims)
    else:
        con.print("[bold]Claims[/]  none")
    render_quotas(con, data["projects"])
    con.print(f"Envelopes are {data['envelopes']}.")
