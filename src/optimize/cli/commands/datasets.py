"""`akka registry datasets register|convert|get|versions|object|list|alias set|alias get`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from optimize.cli.commands.aliases import alias_group
from optimize.cli.common import client_for, command, fail, parse_ref_argument
from optimize.cli.output import Output
from optimize.cli.render import DASH, age, footer, table
from optimize.core.sizes import human_size

app = typer.Typer(help="Dataset versions: register, convert, read, list, alias.", no_args_is_help=True)
app.add_typer(alias_group("dataset", "datasets"), name="alias")


_FILE_HELP = ("Chat rows or preference pairs: JSONL, a JSON array or Parquet, in the registry's formats, OpenAI's "
              "or TRL's; or prepared token rows: a folder, or a ZIP of one, holding prepared.json and its Parquet "
              "files.")
_FORMAT_HELP = ("The rows' format: chat-jsonl-v1, preference-jsonl-v1, openai-chat-jsonl, openai-preference-jsonl, "
                "trl-preference or trl-prompt-completion (default: detected from the first row).")


@command(app, "register")
def register(
    out: Output,
    dataset: Annotated[str, typer.Argument(help="NS/NAME to register the file under.")],
    file: Annotated[Path, typer.Option("-f", "--file", help=_FILE_HELP)],
    data_format: Annotated[str | None, typer.Option("--format", help=_FORMAT_HELP)] = None,
    alias: Annotated[str | None, typer.Option("--alias", help="Point this alias at the registered version.")] = None,
    shard_size: Annotated[
        str | None, typer.Option("--shard-size", help="Cut the file into shards of at most this size (e.g. 64MiB).")
    ] = None,
    no_upload: Annotated[bool, typer.Option(
        "--no-upload", help="Only report which objects the registry lacks (and the version the file would be): "
                            "send nothing, open no upload, register nothing.")] = False,
) -> None:
    """Register a file as a new version (or return the version identical content already is)."""
    from optimize.client.registry import preview_dataset, register_dataset
    from optimize.core.errors import Invalid
    from optimize.core.sizes import parse_size

    reference = parse_ref_argument(dataset, "NS/NAME")
    if reference.selector != "latest":
        raise typer.BadParameter(f"register into {reference.artifact}, without a version or alias",
                                 param_hint="NS/NAME")
    try:
        size = parse_size(shard_size) if shard_size else None
    except Invalid as error:  # a malformed option value is a usage error (exit 2)
        raise typer.BadParameter(f"{error.message}; {error.hint}", param_hint="'--shard-size'") from None
    with client_for(out) as api, _progress(out) as progress:
        if no_upload:  # the same reading, cutting and checks, then only the registry's answer of what it holds
            report = preview_dataset(api, reference, file, data_format=data_format, shard_size=size,
                                     progress=progress)
        else:
            version = register_dataset(api, reference, file, data_format=data_format, alias=alias,
                                       shard_size=size, progress=progress)
    if no_upload:
        out.emit(report, _render_preview)
    else:
        out.emit(version, _render_registered)


images_app = typer.Typer(help="Images of chat rows, kept by the registry under the sha256 of their bytes.",
                         no_args_is_help=True)
app.add_typer(images_app, name="images")


@command(images_app, "push")
def push_images(
    out: Output,
    paths: Annotated[list[Path], typer.Argument(help="Image files (PNG, JPEG, WebP or GIF).")],
) -> None:
    """Send images the registry lacks (each under the sha256 of its bytes); run again after an interruption, it
    sends only the rest. `datasets register` sends the images its rows name itself."""
    from optimize.client.images import checked_image, send_images

    images = [checked_image(str(path), path) for path in paths]
    with client_for(out) as api:
        summary = send_images(api, images)
    out.emit({**summary, "pushed": [{"path": i.path, "sha256": i.sha256, "bytes": i.size} for i in images]},
             _render_pushed)


def _render_pushed(con, d) -> None:
    con.print(f"{d['images']} image(s): sent {d['sent']}, already held {d['alreadyHeld']}")
    for image in d["pushed"]:
        con.print(f"  {image['sha256']}  {image['path']}")


@command(app, "describe-prepared")
def describe_prepared(
    out: Output,
    folder: Annotated[Path, typer.Argument(help="The folder of Parquet files (input_ids and loss_mask columns).")],
    tokenizer: Annotated[str, typer.Option("--tokenizer", help="The tokenizer's repository the rows were made with "
                                                               "(the base model's).")],
    revision: Annotated[str, typer.Option("--revision", help="The tokenizer's commit (the base model's, as "
                                                             "base-models get shows it).")],
    chat_template: Annotated[Path | None, typer.Option("--chat-template", help="The chat template file the rows "
                                                                              "were rendered under.")] = None,
    chat_template_sha256: Annotated[str | None, typer.Option("--chat-template-sha256", help="Its sha256, instead "
                                                                                           "of the file.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace a prepared.json the folder holds.")] = False,
) -> None:
    """Write FOLDER/prepared.json, the descriptor of prepared token rows: the tokenizer, the chat template's sha256
    and every Parquet file under the folder, checked by the registry's rules (no server needed)."""
    import json

    from optimize.chat.prepared import DESCRIPTOR, check_file, describe
    from optimize.chat.render import template_sha256

    if (chat_template is None) == (chat_template_sha256 is None):
        raise typer.BadParameter("name the chat template: --chat-template FILE or --chat-template-sha256 HEX",
                                 param_hint="'--chat-template'")
    if not folder.is_dir():
        raise typer.BadParameter(f"{folder} is not a folder", param_hint="FOLDER")
    target = folder / DESCRIPTOR
    if target.exists() and not force:
        fail(f"{target} exists", hint="pass --force to replace it")
    digest = chat_template_sha256 or template_sha256(chat_template.read_text(encoding="utf-8"))
    descriptor = describe(folder, tokenizer, revision, digest)
    reports = [check_file(folder / name, name) for name in descriptor["files"]]
    bad = [error for report in reports for error in report.errors]
    if bad:
        from optimize.client.registry import RowsRefused

        raise RowsRefused(bad[:20], sum(r.error_count for r in reports), "row", "nothing was written")
    target.write_text(json.dumps(descriptor, indent=2) + "\n", encoding="utf-8")
    out.emit({"written": str(target), "descriptor": descriptor, "rows": sum(r.rows for r in reports),
              "longestRow": max(r.longest for r in reports)},
             lambda con, d: con.print(f"Wrote {d['written']}: {len(d['descriptor']['files'])} Parquet file(s), "
                                      f"{d['rows']} rows, the longest {d['longestRow']} tokens"))


@command(app, "convert")
def convert(
    out: Output,
    file: Annotated[Path, typer.Argument(help=_FILE_HELP)],
    to: Annotated[str | None, typer.Option("--to", help="chat-jsonl-v1 or preference-jsonl-v1 (default: the one "
                                                        "the rows convert to).")] = None,
    data_format: Annotated[str | None, typer.Option("--format", help=_FORMAT_HELP)] = None,
    target: Annotated[Path | None, typer.Option("--out", help="Write the converted rows to this JSONL file "
                                                              "(refused when it exists).")] = None,
) -> None:
    """Show how a file converts into the registry's rows, without registering anything (no server needed)."""
    from optimize.client.registry import convert_dataset

    out.emit(convert_dataset(file, to, data_format, target), _render_conversion)


@command(app, "get")
def get_dataset(out: Output, reference: Annotated[str, typer.Argument(help="NS/NAME[:vN|:ALIAS|@sha256:HEX]")]) -> None:
    """Show a version (the newest when no version is named) with its objects."""
    ref = parse_ref_argument(reference)
    with client_for(out) as api:
        out.emit(api.datasets.get(ref), _render_version)


@command(app, "versions")
def versions(out: Output, dataset: Annotated[str, typer.Argument(help="NS/NAME")]) -> None:
    """List a dataset's versions, newest first."""
    ref = parse_ref_argument(dataset, "NS/NAME")
    with client_for(out) as api:
        out.emit(api.datasets.versions(ref), _render_versions)


@command(app, "object")
def object_bytes(
    out: Output,
    dataset: Annotated[str, typer.Argument(help="NS/NAME[:vN|:ALIAS|@sha256:HEX]")],
    path: Annotated[str, typer.Argument(help="The object's path, as get lists it (examples.jsonl, "
                                             "examples-00001.jsonl, …).")],
) -> None:
    """Write one object of a version (a shard's JSONL) to standard output, byte for byte."""
    import sys

    ref = parse_ref_argument(dataset)
    with client_for(out) as api:
        sys.stdout.flush()
        api.datasets.object(ref, path, sys.stdout.buffer)
        sys.stdout.buffer.flush()


@command(app, "list")
def list_datasets(
    out: Output,
    namespace: Annotated[str | None, typer.Option("--namespace", help="Only this namespace (archived or not).")] = None,
    archived: Annotated[bool, typer.Option("--archived", help="Include archived namespaces.")] = False,
) -> None:
    """List datasets with their newest version."""
    with client_for(out) as api:
        out.emit(api.datasets.list(namespace=namespace, archived=archived), _render_list)


class _progress:
    """Upload progress on stderr: a Rich bar on a terminal; plain lines otherwise — a line a phase for files over
    `PLAIN_FROM` bytes and a line a shard sent when there are several — so a script's log shows where a large
    upload is without noise for small ones. JSON modes print only their answer."""

    PLAIN_FROM = 64 * 1024 * 1024

    def __init__(self, out: Output) -> None:
        import sys

        self.bar_enabled = not out.is_json and sys.stderr.isatty()
        self.plain = not out.is_json and not sys.stderr.isatty()
        self.bar = None
        self.task = None
        self.long = False

    def __enter__(self):
        from optimize.client.registry import UploadProgress

        if self.plain:
            return UploadProgress(phase=self._line, shard_sent=self._shard_line)
        if not self.bar_enabled:
            return UploadProgress()
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

        from optimize.cli.output import console

        self.bar = Progress(TextColumn("{task.description:>9}"), BarColumn(), DownloadColumn(),
                            TransferSpeedColumn(), console=console(stderr=True), transient=True)
        self.bar.start()
        return UploadProgress(phase=self._phase, advance=self._advance)

    def _line(self, name: str, total: int) -> None:
        self.long = total > self.PLAIN_FROM
        if self.long:
            _stderr(f"{name.capitalize()} {human_size(total)}")

    def _shard_line(self, done: int, count: int, size: int) -> None:
        if self.long or count > 1:
            _stderr(f"  sent shard {done} of {count} ({human_size(size)})")

    def _phase(self, name: str, total: int) -> None:
        if self.task is not None:
            self.bar.remove_task(self.task)
        self.task = self.bar.add_task(name, total=total)

    def _advance(self, count: int) -> None:
        self.bar.advance(self.task, count)

    def __exit__(self, *_exc) -> None:
        if self.bar is not None:
            self.bar.stop()


def _stderr(line: str) -> None:
    import sys

    print(line, file=sys.stderr, flush=True)


def _count_line(item) -> str:
    if item.get("prepared"):
        return (f"{item['examples']} prepared row{'s' if item['examples'] != 1 else ''}, the longest "
                f"{item['prepared'].get('longestRow')} tokens")
    if "pairs" in item:
        return f"{item['pairs']} pair{'s' if item['pairs'] != 1 else ''}"
    return f"{item['examples']} example{'s' if item['examples'] != 1 else ''}"


def _tools_line(item) -> str:
    count = item["toolRows"]
    return f"{count} row offers tools" if count == 1 else f"{count} rows offer tools"


def _render_registered(con, item) -> None:
    upload = item["upload"]
    verb = "Registered" if item.get("created") else "Already registered:"
    con.print(f"{verb} [bold]{item['reference']}[/] — {_count_line(item)}, {item['format']}")
    con.print(f"  Digest   {item['digest']}")
    if not item.get("prepared"):  # prepared token rows hold no messages, so no tools
        con.print(f"  Tools    {_tools_line(item)}")
    con.print(f"  Shards   {item['shards']} ({human_size(item['bytes'])}); sent {upload['sent']}, "
              f"already held {upload['alreadyHeld']}")
    if upload.get("images"):
        images = upload["images"]
        con.print(f"  Images   {images['images']}; sent {images['sent']}, already held {images['alreadyHeld']}")
    if item["aliases"]:
        con.print(f"  Aliases  {', '.join(item['aliases'])}")
    if item.get("conversion"):
        con.print(f"  From     {_conversion_line(item['conversion'])}")


def _render_preview(con, item) -> None:
    missing, existing = item["missing"], item["existingVersion"]
    if existing:
        con.print(f"Already registered: [bold]{item['reference']}:{existing}[/] — registering the file returns it")
    else:
        con.print(f"Not registered yet: registering the file adds a version to [bold]{item['reference']}[/]")
    con.print(f"  Digest   {item['digest']}")
    con.print(f"  Format   {item['format']}")
    held = (f"the registry holds {item['held']}, lacks {len(missing)} ({human_size(item['missingBytes'])})"
            if missing else "the registry holds them all")
    con.print(f"  Objects  {item['objects']} ({human_size(item['bytes'])}); {held}")
    if item.get("conversion"):
        con.print(f"  From     {_conversion_line(item['conversion'])}")
    lacking_images = item.get("missingImages") or []
    if item.get("images"):
        con.print(f"  Images   {item['images']}; the registry lacks {len(lacking_images)}")
    if missing or lacking_images:
        grid = table("LACKING", "SIZE", "SHA256")
        for obj in [*missing, *lacking_images]:
            grid.add_row(obj["path"], human_size(obj["bytes"]), obj["sha256"])
        con.print(grid)
    con.print("Nothing was sent or registered (--no-upload).")


def _render_version(con, item) -> None:
    con.print(f"[bold]Dataset[/]   {item['reference']}" + (" (archived)" if item["archived"] else ""))
    con.print(f"Version   v{item['version']} of {item['versionCount']}")
    con.print(f"Digest    {item['digest']}")
    con.print(f"Format    {item['format']}")
    con.print(f"Rows      {_count_line(item)}")
    if not item.get("prepared"):
        con.print(f"Tools     {_tools_line(item)}")
    if item.get("images"):
        con.print(f"Images    {item['images']}")
    con.print(f"Size      {human_size(item['bytes'])} in {item['shards']} object{'s' if item['shards'] != 1 else ''}")
    con.print(f"Aliases   {', '.join(item['aliases']) or DASH}")
    con.print(f"Created   {age(item['createdAt'])}")
    if item.get("conversion"):
        con.print(f"Converted {_conversion_line(item['conversion'])}")
        for rule in item["conversion"]["rules"]:
            con.print(f"            {rule['rule']} ({_rows(rule['rows'])})")
    lineage = lineage_line(item.get("lineage"))
    if lineage:
        con.print(f"Lineage   {lineage}")
    prepared = item.get("prepared")
    if prepared:
        tokenizer = prepared.get("tokenizer") or {}
        con.print(f"Tokenizer {tokenizer.get('repository')} at {str(tokenizer.get('revision'))[:12]}, chat template "
                  f"sha256 {str(prepared.get('chatTemplateSha256'))[:12]}…")
    grid = table("OBJECT", "ROWS", "SIZE", "DIGEST")
    for obj in item.get("objects", []):
        grid.add_row(obj["path"], str(obj["rows"]), human_size(obj["bytes"]), obj["digest"][:19])
    con.print(grid)


def lineage_line(lineage: Any) -> str | None:
    """What produced a version, in words, from its `lineage`: `producedBy` {kind, id}, `teacher` {reference, commit}
    and `source` {reference, digest} (other keys are not shown); None for an uploaded version (no lineage)."""
    if not isinstance(lineage, dict):
        return None

    def part(key: str) -> dict[str, Any]:
        value = lineage.get(key)
        return value if isinstance(value, dict) else {}

    producer, teacher, source = part("producedBy"), part("teacher"), part("source")
    head = " ".join(str(producer[key]) for key in ("kind", "id") if producer.get(key))
    tail = []
    if teacher.get("reference"):
        commit = f" (commit {str(teacher['commit'])[:12]})" if teacher.get("commit") else ""
        tail.append(f"teacher {teacher['reference']}{commit}")
    if source.get("reference") or source.get("digest"):
        tail.append(f"from {source.get('reference') or str(source['digest'])[:19]}")
    if head and tail:
        return f"{head}: {', '.join(tail)}"
    return head or ", ".join(tail) or None


def _render_versions(con, data) -> None:
    grid = table("REFERENCE", "ROWS", "TOOLS", "SHARDS", "SIZE", "ALIASES", "DIGEST", "CREATED")
    for item in data["versions"]:
        grid.add_row(item["reference"], _count_line(item), str(item["toolRows"]), str(item["shards"]),
                     human_size(item["bytes"]), ", ".join(item["aliases"]) or DASH, item["digest"][:19],
                     age(item["createdAt"]))
    con.print(grid)
    con.print(footer(len(data["versions"]), "version"))


def _render_list(con, data) -> None:
    grid = table("DATASET", "KIND", "VERSIONS", "LATEST", "ROWS", "CREATED")
    for item in data["datasets"]:
        name = item["dataset"] + (" (archived)" if item["archived"] else "")
        latest = item["latest"]
        grid.add_row(name, item["kind"], str(item["versions"]), f"v{latest['version']}", _count_line(latest),
                     age(latest["createdAt"]))
    con.print(grid)
    con.print(footer(len(data["datasets"]), "dataset"))


def _rows(count: int) -> str:
    return f"{count} row" if count == 1 else f"{count} rows"


def _conversion_line(record) -> str:
    return f"{record['sourceFormat']} rows in a {record['container']} file ({_rows(record['rows'])})"


def _render_conversion(con, data) -> None:
    record = data["conversion"]
    con.print(f"[bold]{data['file']}[/]: {_conversion_line(record)} → {record['format']}")
    for rule in record["rules"] or [{"rule": "no rule applied: the rows are the registry's own", "rows": 0}]:
        con.print(f"  {rule['rule']}" + (f" ({_rows(rule['rows'])})" if rule["rows"] else ""))
    if data.get("written"):
        con.print(f"Wrote {data['written']}")
    for row in data.get("preview", []):
        con.print_json(data=row)
    if data.get("preview"):
        con.print(f"(the first {len(data['preview'])} of {record['rows']} rows; --out FILE writes them all)")
