"""`akka registry models list|get|register|versions|files|download|export|alias set|alias get`.

`download` writes a version's files into a folder, each streamed to a hidden partial file, checked against the
sha256 and size the server lists, and only then renamed into place: a file that does not match is refused and
leaves nothing behind. `export --merged` downloads the adapter and its base model the same way into a scratch
folder beside the target, merges them with PEFT in this process (torch, Transformers and PEFT are imported only
there) and moves the merged model's files into the target.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from optimize.cli.commands.aliases import alias_group
from optimize.cli.common import client_for, command, fail, parse_ref_argument
from optimize.cli.output import Output
from optimize.cli.render import DASH, age, footer, table

if TYPE_CHECKING:
    from optimize.client.api import OptimizeApi

app = typer.Typer(help="Model versions: read, list, alias, download and export (base models on selection, trained "
                       "models from runs).", no_args_is_help=True)
app.add_typer(alias_group("model", "models"), name="alias")


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
def get_model(out: Output,
              reference: Annotated[str, typer.Argument(help="NS/NAME[:vN|:ALIAS|:latest|@sha256:HEX]")]) -> None:
    """Show a version (the newest, with the version list and every alias move, when no version is named)."""
    ref = parse_ref_argument(reference)
    with client_for(out) as api:
        out.emit(api.models.get(ref), _render_version)


@command(app, "register")
def register(
    out: Output,
    model: Annotated[str, typer.Argument(help="NS/NAME to register the weights under (NS: the run's project).")],
    snapshot: Annotated[str, typer.Option("--snapshot", help="The snapshot whose adapter weights to register "
                                                             "(akka training runs snapshots RUN lists them).")],
    alias: Annotated[str | None, typer.Option("--alias", help="Point this alias at the version (e.g. "
                                                              "candidate).")] = None,
) -> None:
    """Register a run's save (e.g. a branch's best step) as a model version; the same weights are the same
    version."""
    ref = parse_ref_argument(model, "NS/NAME")
    if ref.selector != "latest":
        raise typer.BadParameter(f"register into {ref.artifact}, without a version or alias", param_hint="NS/NAME")
    with client_for(out) as api:
        version = api.models.register(ref, snapshot=snapshot, alias=alias)
    out.emit(version, lambda con, v: con.print(
        f"Registered {v['reference']}" + (f" ({', '.join(a for a in v['aliases'] if a != 'latest')})"
                                         if set(v["aliases"]) - {"latest"} else "") + "."))


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


def _produced_by(item: dict[str, Any], short: bool = False) -> str:
    """What produced the version: a run (its id, the first 12 characters in a table), an import, …"""
    producer = item["producedBy"]
    if not producer:
        return DASH
    return f"{producer['kind']} {(producer['id'] or '')[:12] if short else producer['id']}".rstrip()


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
    if item.get("aliasMoves"):
        con.print()
        grid = table("ALIAS", "FROM", "TO", "BY", "WHEN")
        for move in item["aliasMoves"]:
            grid.add_row(move["alias"], f"v{move['from']}" if move["from"] else DASH, f"v{move['to']}",
                         move["by"] or DASH, age(move["at"]))
        con.print(grid)


def _render_versions(con, data) -> None:
    scored = [item["standingScore"] for item in data["versions"] if item.get("standingScore")]
    # the held-out score from the project's standing evaluation, the dataset it is on named below the table; never a
    # score on what the version was trained on
    heading = "HELD-OUT SCORE"
    columns = ["REFERENCE", "VARIANT", "BASE MODEL", "PRODUCED BY", "ALIASES", "DIGEST", "REGISTERED"]
    grid = table(*columns, *([heading] if scored else []))
    for item in data["versions"]:
        cells = [item["reference"], item["variant"], _base(item) or DASH, _produced_by(item, short=True),
                 ", ".join(item["aliases"]) or DASH, item["digest"][:19], age(item["registeredAt"])]
        grid.add_row(*cells, *([_standing(item.get("standingScore"))] if scored else []))
    con.print(grid)
    con.print(footer(len(data["versions"]), "version"))
    for dataset, grader in sorted({(score["dataset"], score["grader"]) for score in scored}):
        con.print(f"Held-out score: the project's standing evaluation on {dataset} with {grader}")
    for item in data["versions"]:
        score = item.get("standingScore")
        if score and score["refusal"]:
            con.print(f"{item['reference']}: its standing evaluation was refused: {score['refusal']}")


def _standing(score: dict[str, Any] | None) -> str:
    """A version's held-out score, or where its standing evaluation is."""
    if not score:
        return DASH
    if score["meanScore"] is not None:
        return f"{score['meanScore']:.3f}"
    if score["refusal"]:
        return "refused"
    if score["phase"] is None:
        return "starting"
    return score["phase"].lower()


def _render_list(con, data) -> None:
    grid = table("MODEL", "VERSIONS", "LATEST", "VARIANT", "REGISTERED")
    for item in data["models"]:
        latest = item["latest"]
        grid.add_row(item["model"] + (" (archived)" if item["archived"] else ""), str(item["versions"]),
                     f"v{latest['version']}", latest["variant"], age(latest["registeredAt"]))
    con.print(grid)
    con.print(footer(len(data["models"]), "model"))


# --- files, download, export ---------------------------------------------------------------------------------

DirOption = Annotated[Path, typer.Option(
    "-d", "--dir", help="Folder to write into: created; refused when it exists and is not empty, unless --force.")]
ForceOption = Annotated[bool, typer.Option(
    "--force", help="Write into a folder that is not empty: files of the same name are replaced, others left.")]


@command(app, "files")
def files(out: Output, reference: Annotated[str, typer.Argument(help="NS/NAME[:vN|:ALIAS|@sha256:HEX]")]) -> None:
    """List the files a download of the version writes, with their sha256 and size."""
    ref = parse_ref_argument(reference)
    with client_for(out) as api:
        out.emit(api.models.files(ref), _render_files)


@command(app, "download")
def download(
    out: Output,
    reference: Annotated[str, typer.Argument(help="NS/NAME[:vN|:ALIAS|@sha256:HEX]")],
    directory: DirOption,
    force: ForceOption = False,
) -> None:
    """Download a version into a folder: a trained adapter as a PEFT folder (adapter_model.safetensors,
    adapter_config.json) with the tokenizer and chat template it trained under, a full fine-tune's every weight as a
    Transformers folder with them, or a base model's files. Every file is checked against its sha256 before it takes
    its name."""
    ref = parse_ref_argument(reference)
    target = _writable(directory, force)
    with client_for(out, timeout=600) as api:
        listed = api.models.files(ref)
        written = _download(api, out, listed, target)
    out.emit({"reference": listed["reference"], "variant": listed["variant"], "baseModel": listed["baseModel"],
              "directory": str(target), "chatTemplate": listed["chatTemplate"], "files": written,
              "size": sum(item["size"] for item in written)}, _render_written)


@command(app, "export")
def export(
    out: Output,
    reference: Annotated[str, typer.Argument(help="NS/NAME[:vN|:ALIAS|@sha256:HEX] of a trained adapter")],
    directory: DirOption,
    merged: Annotated[bool, typer.Option(
        "--merged", help="Merge the adapter into its base model (the only export there is).")] = False,
    force: ForceOption = False,
) -> None:
    """Export a trained adapter merged into its base model: a plain Transformers folder (safetensors weights,
    config, tokenizer and the chat template it trained under) that Transformers and vLLM load without PEFT.
    The merge runs here, on this machine's CPU, after downloading the adapter and the base model."""
    ref = parse_ref_argument(reference)
    if not merged:
        fail("export writes the base model with the adapter merged into it; say so with --merged",
             hint=f"for the adapter folder itself: akka registry models download {reference} --dir DIR", code=2)
    target = _writable(directory, force)
    with client_for(out, timeout=600) as api:
        listed = api.models.files(ref)
        if listed["variant"] != "ADAPTER":
            fail(f"{listed['reference']} is a {listed['variant'].lower()} model, not an adapter: there is nothing "
                 "to merge", hint=f"download its files: akka registry models download {listed['reference']} "
                                  "--dir DIR")
        if not listed.get("baseModel"):
            fail(f"{listed['reference']} names no registered base model to merge into",
                 hint="select its base model on the server (akka training base-models select), then export")
        base = api.models.files(parse_ref_argument(listed["baseModel"]))
        written = _export_merged(api, out, listed, base, target)
    out.emit({"reference": listed["reference"], "baseModel": base["reference"], "merged": True,
              "directory": str(target), "chatTemplate": listed["chatTemplate"], "files": written,
              "size": sum(item["size"] for item in written)}, _render_written)


def _writable(directory: Path, force: bool) -> Path:
    if directory.exists() and not directory.is_dir():
        fail(f"{directory} exists and is not a folder", hint="name a folder to write into with --dir")
    if directory.is_dir() and any(directory.iterdir()) and not force:
        fail(f"{directory} exists and is not empty",
             hint="pass --force to write into it (files of the same name are replaced), or name another folder "
                  "with --dir")
    return directory


def _inside(folder: Path, relative: str) -> Path:
    """Where a listed file goes; a path that could leave the folder is refused (the server never lists one)."""
    parts = relative.split("/")
    if not relative or "\\" in relative or relative.startswith("/") or any(p in ("", ".", "..") for p in parts):
        fail(f"the server listed the file path {relative!r}, which is not inside the folder; nothing was written "
             "for it")
    return folder.joinpath(*parts)


def _download(api: OptimizeApi, out: Output, listed: dict[str, Any], folder: Path) -> list[dict[str, Any]]:
    """Each listed file of the version (named by its number, so a version added meanwhile changes nothing)."""
    from optimize.core.refs import parse_reference
    from optimize.core.sizes import human_size

    reference = parse_reference(listed["reference"])
    folder.mkdir(parents=True, exist_ok=True)
    written, count = [], len(listed["files"])
    with _Bar(out) as bar:
        for number, item in enumerate(listed["files"], 1):
            _fetch(api, reference, item, _inside(folder, item["path"]), bar)
            out.note(f"  [{number}/{count}] {item['path']}  {human_size(item['size'])}  "
                     f"sha256:{item['sha256'][:12]}  verified")
            written.append({"path": item["path"], "sha256": item["sha256"], "size": item["size"]})
    return written


def _fetch(api: OptimizeApi, reference, item: dict[str, Any], path: Path, bar: _Bar) -> None:
    """Stream one file to a hidden partial file, hashing it; rename it into place only when it matches."""
    import os
    import secrets

    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{secrets.token_hex(4)}.part")
    bar.begin(item["path"], item["size"])
    try:
        with partial.open("wb") as handle:
            sink = _HashingSink(handle, bar.advance)
            api.models.download_file(reference, item["path"], sink)
            handle.flush()
            os.fsync(handle.fileno())
        got = sink.digest.hexdigest()
        if got != item["sha256"] or sink.size != item["size"]:
            fail(f"the bytes received for {item['path']} of {reference} hash to sha256:{got} ({sink.size} bytes), not "
                 f"the listed sha256:{item['sha256']} ({item['size']} bytes); it was not written",
                 hint="download it again; if it fails the same way, the server's copy is damaged")
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


class _HashingSink:
    """A binary sink that hashes and counts what it writes, and reports progress."""

    def __init__(self, handle, advance) -> None:
        import hashlib

        self.handle, self.advance, self.size = handle, advance, 0
        self.digest = hashlib.sha256()

    def write(self, chunk: bytes) -> int:
        self.digest.update(chunk)
        self.size += len(chunk)
        self.advance(len(chunk))
        return self.handle.write(chunk)


class _Bar:
    """A Rich progress bar per file on stderr (text mode on a terminal only)."""

    def __init__(self, out: Output) -> None:
        import sys

        self.enabled = not out.is_json and sys.stderr.isatty()
        self.bar = self.task = None

    def __enter__(self) -> _Bar:
        if self.enabled:
            from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

            from optimize.cli.output import console

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                                TransferSpeedColumn(), console=console(stderr=True), transient=True)
            self.bar.start()
        return self

    def begin(self, name: str, total: int) -> None:
        if self.bar is not None:
            if self.task is not None:
                self.bar.remove_task(self.task)
            self.task = self.bar.add_task(name, total=total)

    def advance(self, count: int) -> None:
        if self.bar is not None and self.task is not None:
            self.bar.advance(self.task, count)

    def __exit__(self, *_exc) -> None:
        if self.bar is not None:
            self.bar.stop()


def _export_merged(api: OptimizeApi, out: Output, adapter: dict[str, Any], base: dict[str, Any],
                   target: Path) -> list[dict[str, Any]]:
    """Download both into a scratch folder beside the target (same file system), merge, move the result in."""
    import shutil
    import tempfile

    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}.export-", dir=target.parent))
    try:
        out.note(f"Downloading the adapter {adapter['reference']}")
        _download(api, out, adapter, scratch / "adapter")
        out.note(f"Downloading the base model {base['reference']}")
        _download(api, out, base, scratch / "base")
        out.note(f"Merging {adapter['reference']} into {base['reference']}")
        _merge(scratch / "base", scratch / "adapter", adapter, scratch / "merged")
        return _move_into(scratch / "merged", target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _merge(base: Path, adapter: Path, listed: dict[str, Any], target: Path) -> None:
    """PEFT's merge_and_unload over the base model in its stored dtype, saved as safetensors, with the tokenizer
    files and chat template the run trained under copied as downloaded."""
    import shutil
    import warnings

    try:
        from peft import PeftModel
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as transformers_logging
    except ImportError as error:
        fail(f"export --merged needs torch, Transformers and PEFT here ({error.name} is missing)",
             hint="install the training extra: pip install -e '.[train]'")
    verbosity, bars = transformers_logging.get_verbosity(), transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()  # the command reports its own progress
    transformers_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # the libraries' own deprecations: not the user's to act on
            model = AutoModelForCausalLM.from_pretrained(str(base), dtype="auto")
            merged = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
            merged.save_pretrained(str(target))
    finally:
        transformers_logging.set_verbosity(verbosity)
        if bars:
            transformers_logging.enable_progress_bar()
    for item in listed["files"]:
        if item["source"] in ("base", "chatTemplate"):  # the tokenizer files, not the adapter's own
            destination = target.joinpath(*item["path"].split("/"))
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(adapter.joinpath(*item["path"].split("/")), destination)


def _move_into(source: Path, target: Path) -> list[dict[str, Any]]:
    """Rename each file of `source` into `target` (same file system), with its sha256 and size."""
    import os

    from optimize.core.digests import file_sha256

    mask = os.umask(0)
    os.umask(mask)
    written = []
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        relative = path.relative_to(source)
        written.append({"path": relative.as_posix(), "sha256": file_sha256(path), "size": path.stat().st_size})
        destination = target / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(path, 0o666 & ~mask)  # as a file this user writes (a library may have written it private)
        os.replace(path, destination)
    return written


def _render_files(con, data) -> None:
    from optimize.core.sizes import human_size

    con.print(f"[bold]Model[/]        {data['reference']} ({data['variant']})")
    if data.get("baseModel"):
        con.print(f"Base model   {data['baseModel']}")
    template = data.get("chatTemplate")
    con.print("Template     " + (f"{template['path']} ({template['source']}, sha256:{template['sha256'][:12]})"
                                 if template else DASH))
    con.print()
    grid = table("PATH", "SIZE", "SHA256", "FROM")
    for item in data["files"]:
        grid.add_row(item["path"], human_size(item["size"]), item["sha256"][:16], item["source"])
    con.print(grid)
    con.print(f"{footer(len(data['files']), 'file')[:-1]}, {human_size(data['size'])} in all.")


def _render_written(con, data) -> None:
    from optimize.core.sizes import human_size

    count = f"{footer(len(data['files']), 'file')[:-1]}, {human_size(data['size'])}"
    if data.get("merged"):
        con.print(f"Wrote {data['reference']} merged into {data['baseModel']} to {data['directory']}: {count} "
                  "(merged from files each verified by sha256).")
        con.print(f"Load it with: AutoModelForCausalLM.from_pretrained({data['directory']!r})")
        return
    con.print(f"Wrote {data['reference']} ({data['variant'].lower()}) to {data['directory']}: {count}, each "
              "verified by sha256.")
    if data["variant"] == "ADAPTER":
        con.print(f"Load it with PEFT over {data['baseModel'] or 'its base model'}: "
                  f"PeftModel.from_pretrained(base, {data['directory']!r})")
    elif data["variant"] == "WEIGHTS":
        con.print(f"Load it with: AutoModelForCausalLM.from_pretrained({data['directory']!r})")
