"""`akka server start|settings|status|gc`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from optimize.cli.common import client_for, command
from optimize.cli.output import Output

app = typer.Typer(help="Run the Optimize control plane and check on it.", no_args_is_help=True)


@app.command("start")
def start(
    host: Annotated[str, typer.Option(help="Address to bind; loopback unless told otherwise.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (0 picks a free one).")] = 9001,
    data_dir: Annotated[
        Path | None,
        typer.Option("--data-dir",
                     help="Where the database and blobs live (env OPTIMIZE_HOME, default ~/.optimize)."),
    ] = None,
    database_url: Annotated[
        str | None,
        typer.Option("--database-url",
                     help="SQL store URL, e.g. postgresql://user@host/db (env OPTIMIZE_DATABASE_URL, default: SQLite "
                          "in the data dir)."),
    ] = None,
    blob_store: Annotated[
        str | None,
        typer.Option("--blob-store",
                     help="Where blobs live: s3://BUCKET/PREFIX (env OPTIMIZE_BLOB_STORE; endpoint, region and "
                          "credentials from the AWS_* variables; default: the data dir's blobs folder)."),
    ] = None,
    mlflow: Annotated[
        str | None,
        typer.Option("--mlflow", metavar="URI",
                     help="Forward every run's metrics, params and end status to this MLflow tracking server "
                          "(env OPTIMIZE_MLFLOW_URI; docs/trackers.md; default: none)."),
    ] = None,
    wandb: Annotated[
        str | None,
        typer.Option("--wandb", metavar="offline|online",
                     help="Forward every run's metrics to Weights & Biases: offline (folders to send with `wandb "
                          "sync`) or online (WANDB_API_KEY, WANDB_ENTITY, WANDB_PROJECT, WANDB_BASE_URL); "
                          "env OPTIMIZE_WANDB; docs/trackers.md. Default: none."),
    ] = None,
    wandb_dir: Annotated[
        Path | None,
        typer.Option("--wandb-dir",
                     help="W&B's folder: offline runs are written in DIR/wandb (env OPTIMIZE_WANDB_DIR, default: "
                          "the data dir)."),
    ] = None,
    catalog: Annotated[
        Path | None, typer.Option("--catalog", help="The applied base-model catalog (default: the shipped one).")
    ] = None,
    executor: Annotated[
        str | None, typer.Option("--executor", metavar="local|ray",
                                 help="Where workers run: processes on this host (local, the default) or the nodes "
                                      "of a Ray cluster (ray); env OPTIMIZE_EXECUTOR.")
    ] = None,
    ray_address: Annotated[
        str | None, typer.Option("--ray-address",
                                 help="The Ray cluster to join with --executor ray (env OPTIMIZE_RAY_ADDRESS; "
                                      "default: RAY_ADDRESS, or a cluster started on this host).")
    ] = None,
) -> None:
    """Start the server in the foreground: migrations applied, then the API on HOST:PORT. Every OPTIMIZE_* setting
    is checked first (`akka server settings` lists them): a malformed one refuses the start, exit 2."""
    from optimize.core.environment import check_all
    from optimize.core.errors import Invalid, PlatformError

    try:
        check_all()  # every OPTIMIZE_* setting, before anything is read from one or a port is bound
    except Invalid as error:
        print(f"error: {error.message} ({error.hint})", file=sys.stderr, flush=True)  # one line, naming it
        raise typer.Exit(2) from None
    from optimize.api.serve import bind, check_blob_store, check_trackers, serve
    from optimize.catalog.catalog import load_catalog
    from optimize.cli.output import print_error
    from optimize.core.settings import ServerSettings, default_home, parse_blob_store, wandb_where
    from optimize.scoring.sandbox import UNSAFE_SETTING, require_sandbox

    try:
        load_catalog(catalog)  # refuse a bad catalog before binding anything
    except PlatformError as error:
        print_error(error.message, "fix the catalog file, or start without --catalog to apply the shipped one")
        raise typer.Exit(1) from None
    try:  # the OPTIMIZE_* settings are read here: a bad one is refused before a port is bound
        settings = ServerSettings(data_dir=(data_dir or default_home()).expanduser().resolve(),
                                  database_url=database_url, blob_store=blob_store, mlflow=mlflow, wandb=wandb,
                                  wandb_dir=wandb_dir, host=host, port=port,
                                  catalog_path=catalog,
                                  **({"executor": executor} if executor else {}),
                                  **({"ray_address": ray_address} if ray_address else {}))
        parse_blob_store(settings.resolved_blob_store)  # s3://BUCKET/PREFIX or nothing
        check_trackers(settings)  # a sweep interval that is no number of seconds
        sandbox = require_sandbox()  # scoring bundles run only in a sandbox that starts here (or the unsafe opt-out)
    except PlatformError as error:
        print_error(error.message, error.hint or "fix the setting and start again")
        raise typer.Exit(1) from None
    if sandbox is None:
        print(f"warning: scoring bundles run without a sandbox ({UNSAFE_SETTING} is set): their code can read and "
              "write everything this server can", file=sys.stderr, flush=True)
    check_blob_store(settings)  # a bucket that does not answer refuses the start before a port is bound
    if settings.resolved_mlflow:
        _require_client("--mlflow", "MLflow's", "mlflow", "mlflow-skinny==3.18.0")
    if settings.resolved_wandb:
        _require_client("--wandb", "W&B's", "wandb", "wandb==0.31.0")
        _check_wandb_dir(settings.resolved_wandb_dir)
    try:
        sock = bind(host, port)
    except OSError as error:
        print_error(f"cannot listen on {host}:{port}: {error.strerror}", "pick another --port or stop what holds it")
        raise typer.Exit(1) from None
    blobs = f", blobs in {settings.resolved_blob_store}" if settings.resolved_blob_store else ""
    blobs += f", run metrics forwarded to MLflow at {settings.resolved_mlflow}" if settings.resolved_mlflow else ""
    if settings.resolved_wandb:
        blobs += f", run metrics forwarded to {wandb_where(settings.resolved_wandb, settings.resolved_wandb_dir)}"
    print(f"Optimize server on http://{host}:{sock.getsockname()[1]} (data in {settings.data_dir}{blobs})", flush=True)
    serve(settings, sock)


def _require_client(flag: str, whose: str, module: str, package: str) -> None:
    """A tracker flag is refused before a port is bound where its tracker's client is not installed."""
    import importlib.util

    from optimize.cli.output import print_error

    if importlib.util.find_spec(module) is None:
        print_error(f"{flag} needs {whose} client, which is not installed",
                    f"install it with: pip install 'optimize[trackers]' (or pip install {package})")
        raise typer.Exit(1) from None


def _check_wandb_dir(folder: Path) -> None:
    """--wandb is refused before a port is bound without a folder W&B can write in."""
    import os

    from optimize.cli.output import print_error

    try:
        (folder / "wandb").mkdir(parents=True, exist_ok=True)
        writable = os.access(folder / "wandb", os.W_OK)
    except OSError as error:
        print_error(f"--wandb-dir {folder}: cannot create {folder / 'wandb'} ({error.strerror})",
                    "pick a folder the server's user can write in (--wandb-dir or OPTIMIZE_WANDB_DIR)")
        raise typer.Exit(1) from None
    if not writable:
        print_error(f"--wandb-dir {folder}: {folder / 'wandb'} is not writable by the server's user",
                    "pick a folder the server's user can write in (--wandb-dir or OPTIMIZE_WANDB_DIR)")
        raise typer.Exit(1) from None


@command(app, "settings")
def settings(out: Output) -> None:
    """List every OPTIMIZE_* setting with the value `akka server start` would use here (secrets masked), its
    default, type and meaning; those set in this environment are marked. Exits 2 where one is malformed, as the
    start would (docs/settings.md)."""
    from optimize.cli.output import CommandFailed
    from optimize.core.environment import listing

    rows = list(listing())
    out.emit({"settings": rows}, _render_settings)
    problems = [row["problem"] for row in rows if row["problem"]]
    if problems:
        if not out.is_json:  # the document above names them in JSON modes
            for problem in problems:
                print(f"error: {problem}", file=sys.stderr, flush=True)
        raise CommandFailed(2)


@command(app, "status")
def status(out: Output) -> None:
    """Say whether a server answers at --server; exits 1 when none does."""
    with client_for(out) as api:
        health = answering(api, out)
    out.emit({"server": out.server, "reachable": True, **health}, _render_status)


def answering(api, out: Output) -> dict:
    """The server's health (version and store), asked once; refuses when nothing answers at --server, or something
    that is no Optimize server does."""
    from optimize.client.http import ApiError

    try:
        return api.health()
    except ApiError as error:
        if error.code == "unreachable":
            raise  # "no Optimize server answers at URL (ConnectError)", with how to start one
        raise ApiError(f"{out.server} does not answer as an Optimize server: {error.message}",
                       status=error.status, code=error.code,
                       hint=error.hint or "point --server / OPTIMIZE_URL at an Optimize server", body=error.body
                       ) from None


@command(app, "gc")
def gc(
    out: Output,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Count what would be removed; remove nothing.")] = False,
) -> None:
    """Remove upload sessions past their expiry (or refused), dataset shards no version holds and blobs nothing
    references (administrators; the server also does this every hour)."""
    with client_for(out) as api:
        out.emit(api.collect(dry_run=dry_run), _render_collected)


def _render_collected(con, data) -> None:
    from optimize.core.sizes import human_size

    verb = "Would remove" if data["dryRun"] else "Removed"
    con.print(f"{verb} {data['uploadSessions']} upload session(s), {data['shards']} shard(s) "
              f"({human_size(data['bytes'])}) and {data.get('blobs', 0)} blob(s) "
              f"({human_size(data.get('blobBytes', 0))}).")
    if data.get("unreadableManifests"):
        con.print(f"[yellow]No blob was removed: {len(data['unreadableManifests'])} referenced manifest(s) cannot be "
                  f"read[/] ({', '.join(data['unreadableManifests'][:3])}); the server log names them all.")


def _render_status(con, data) -> None:
    con.print(f"[green]●[/] Optimize {data['version']} answers at {data['server']} (store: {data['database']})")


def _render_settings(con, data) -> None:
    from optimize.cli.render import footer, table

    grid = table("", "SETTING", "VALUE", "DEFAULT", "TYPE", "MEANING")
    for column in grid.columns[:2] + grid.columns[4:5]:
        column.no_wrap = True  # names and types read whole; the meaning wraps first
    for column in grid.columns[2:4]:
        column.max_width = 32
    for row in data["settings"]:
        value = f"{row['shown']} (malformed)" if row["problem"] else row["shown"]
        grid.add_row("*" if row["set"] else "", row["name"], value, row["default"], row["type"], row["meaning"])
    con.print(grid)
    chosen = sum(row["set"] for row in data["settings"])
    con.print(f"{footer(len(data['settings']), 'setting')[:-1]}, {chosen} set here (marked *); secrets are masked.")
