"""`akka registry models list|get|versions`."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from optimize.cli.common import client_for, command, parse_ref_argument
from optimize.cli.output import Output
from optimize.cli.render import DASH, age, footer, table

app = typer.Typer(help="Model versions: read, list (base models on selection, trained models from runs).",
                  no_args_is_help=True)


@command(app, "list")
def list_models(
    out: Output,
    namespace: Annotated[str | None, typer.Option("--namespace", help="Only this namespace (archived or not).")] = None,
    project: Annotated[str | None, typer.Option("--project", help="Only this training project's models.")] = None,
    archived: Annotated[bool, typer.Option("--archived", help="Include archived namespaces.")] = False,
) -> None:
    """List models with their newest version."""
    with client_for(out) as api:
        out.emit(api.models.list(namespace=namespace, project=project, archived=archived), _render_list)


@command(app, "get")
def get_model(out: Output, reference: Annotated[str, typer.Argument(help="NS/NAME[:vN|:latest|@sha256:HEX]")]) -> None:
    """Show a version (the newest, with the version list, when no version is named)."""
    ref = parse_ref_argument(reference)
    with client_for(out) as api:
        out.emit(api.models.get(ref), _render_version)


@command(app, "versions")
def versions(
    out: Output,
    model: Annotated[str, typer.Argument(help="NS/NAME")],
    base_model: Annotated[str | None, typer.Option("--base-model", help="Only versions over this base model.")] = None,
    produced_by_kind: Annotated[
        str | None,
        typer.Option("--produced-by-kind", help="Only versions by this producer kind (with --produced-by-id)."),
    ] = None,
    produced_by_id: Annotated[
        str | None, typer.Option("--produced-by-id", help="Only versions by this producer, e.g. a run id.")
    ] = None,
) -> None:
    """List a model's versions, newest first."""
    ref = parse_ref_argument(model, "NS/NAME")
    with client_for(out) as api:
        data = api.models.versions(ref, base_model=base_model, produced_by_kind=produced_by_kind,
                                   produced_by_id=produced_by_id)
    out.emit(data, _render_versions)


def _base(item: dict[str, Any]) -> str | None:
    return item["lineage"].get("baseModel") or item["servingModel"].get("baseModel")


def _produced_by(item: dict[str, Any]) -> str:
    producer = item["producedBy"]
    return f"{producer['kind']} {producer['id']}" if producer else DASH


def _serving(item: dict[str, Any]) -> str:
    serving = item["servingModel"]
    if item["variant"] == "BASE":
        return f"base weights at {serving.get('revision', '')[:12]} ({serving.get('repository', DASH)})"
    if item["variant"] == "ADAPTER":
        return f"adapter over {_base(item) or DASH}, rank {serving.get('adapterRank', DASH)}"
    return f"full weights over {_base(item) or DASH}"


def _artifact(serving: dict[str, Any]) -> str:
    artifact = serving.get("artifact")
    if isinstance(artifact, dict):
        return artifact.get("manifestDigest") or artifact.get("location") or DASH
    return artifact or DASH


def _datasets(lineage: dict[str, Any]) -> str:
    items = [f"{d['reference']} ({d['role']})" if d.get("role") else d["reference"]
             for d in lineage.get("datasets", [])]
    return ", ".join(items) or DASH


def _render_version(con, item) -> None:
    base = _base(item)
    con.print(f"[bold]Model[/]        {item['reference']}" + (" (archived)" if item["archived"] else ""))
    con.print(f"Version      v{item['version']} of {item['versionCount']}")
    con.print(f"Digest       {item['digest']}")
    con.print(f"Registered   {age(item['registeredAt'])}")
    con.print(f"Aliases      {', '.join(item['aliases']) or DASH}")
    con.print(f"Lifecycle    {item['lifecycle']}")
    con.print(f"Variant      {item['variant']}")
    con.print(f"Base model   {base or DASH}")
    con.print(f"Parent       {f'base model {base}' if base else DASH}")
    con.print(f"Produced by  {_produced_by(item)}")
    con.print(f"Serving      {_serving(item)}")
    con.print(f"Artifact     {_artifact(item['servingModel'])}")
    con.print(f"Modules      {', '.join(item['servingModel'].get('modules') or []) or DASH}")
    con.print(f"Datasets     {_datasets(item['lineage'])}")
    if "versions" in item:
        con.print()
        _render_versions(con, item)


def _render_versions(con, data) -> None:
    grid = table("REFERENCE", "VARIANT", "BASE MODEL", "PRODUCED BY", "ALIASES", "DIGEST", "REGISTERED")
    for item in data["versions"]:
        grid.add_row(item["reference"], item["variant"], _base(item) or DASH, _produced_by(item),
                     ", ".join(item["aliases"]) or DASH, item["digest"][:19], age(item["registeredAt"]))
    con.print(grid)
    con.print(footer(len(data["versions"]), "version"))


def _render_list(con, data) -> None:
    grid = table("MODEL", "VERSIONS", "LATEST", "VARIANT", "REGISTERED")
    for item in data["models"]:
        latest = item["latest"]
        grid.add_row(item["model"] + (" (archived)" if item["archived"] else ""), str(item["versions"]),
                     f"v{latest['version']}", latest["variant"], age(latest["registeredAt"]))
    con.print(grid)
    con.print(footer(len(data["models"]), "model"))
