"""The resumable, sharded dataset upload behind `registry datasets register` (its calls are api.py's)."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optimize.chat.formats import DatasetFormat, dataset_version_digest, parse_format
from optimize.chat.jsonl import JsonlValidator
from optimize.chat.source_files import Container, Conversion, convert_file, inspect_source
from optimize.chat.sources import parse_source_format
from optimize.client.api import OptimizeApi
from optimize.client.http import ApiError, OptimizeClient
from optimize.client.images import rows_images, send_images
from optimize.client.prepared import PreparedFiles, is_prepared, prepared_files
from optimize.core.crashpoints import crashpoint
from optimize.core.errors import Invalid
from optimize.core.limits import DatasetLimits
from optimize.core.refs import Reference
from optimize.core.sharding import Shard, plan_shards

_CHUNK = 1024 * 1024
MAX_REPORTED_ERRORS = 20


@dataclass
class UploadProgress:
    """Callbacks the CLI uses to draw progress; every one is optional."""

    phase: Callable[[str, int], None] = lambda _name, _total: None
    advance: Callable[[int], None] = lambda _n: None
    shard_sent: Callable[[int, int, int], None] = lambda _done, _count, _size: None  # (n-th sent, of, bytes)


@dataclass
class RowsRefused(Exception):
    """The server refused rows of the file; lists the first of them and the count."""

    errors: list[dict[str, Any]] = field(default_factory=list)
    count: int = 0
    unit: str = "line"  # rows of a JSON array or a Parquet file are counted as rows
    outcome: str = "nothing was registered"

    def __str__(self) -> str:
        return f"the file has {self.count} bad {self.unit}(s); {self.outcome}"


def _read_range(path: Path, offset: int, size: int, advance: Callable[[int], None]) -> Iterator[bytes]:
    with path.open("rb") as handle:
        handle.seek(offset)
        remaining = size
        while remaining:
            chunk = handle.read(min(_CHUNK, remaining))
            if not chunk:
                raise Invalid(f"{path} changed while it was being sent", hint="register it again")
            remaining -= len(chunk)
            advance(len(chunk))
            yield chunk


def register_dataset(
    client: OptimizeApi | OptimizeClient,
    reference: Reference,
    path: Path,
    *,
    data_format: str | None = None,
    alias: str | None = None,
    shard_size: int | None = None,
    progress: UploadProgress | None = None,
) -> dict[str, Any]:
    """Cut, hash and send `path` as a version of `reference`, sending only shards the registry lacks. A file in
    another format (or container) is converted first, into a temporary JSONL, and the version records how."""
    api = OptimizeApi.over(client)
    progress = progress or UploadProgress()
    if is_prepared(path):
        with prepared_files(path, RowsRefused) as files:
            return _upload_prepared(api, reference, files, alias, progress)
    limits = DatasetLimits.from_json(api.registry_info()["datasets"])
    with _rows_file(path, data_format) as (rows, fmt, conversion):
        images = rows_images(rows, path.parent)
        sent = None
        if images:  # the images first: the version is committed only once the registry holds every one
            progress.phase("images", sum(image.size for image in images))
            sent = send_images(api, images, progress.advance)
        version = _upload(api, reference, rows, fmt, conversion, alias, shard_size, limits, progress,
                          [image.entry() for image in images])
        if sent is not None:
            version["upload"]["images"] = sent
        return version


def preview_dataset(
    client: OptimizeApi | OptimizeClient,
    reference: Reference,
    path: Path,
    *,
    data_format: str | None = None,
    shard_size: int | None = None,
    progress: UploadProgress | None = None,
) -> dict[str, Any]:
    """What registering `path` as a version of `reference` would do, sending and registering nothing: the file is
    read, converted and cut into shards exactly as `register_dataset` cuts it, the registry says which shards it
    holds and whether the dataset holds this version already, and the shards it lacks are checked row by row here,
    as the registry would check them as they arrive. The answer: the version's `digest`, the `existingVersion`
    (vN, or None), the `objects` and their `bytes`, how many are `held`, the `missing` ones (path, sha256, bytes)
    with their `missingBytes`, and the `conversion` a converted file would record."""
    api = OptimizeApi.over(client)
    progress = progress or UploadProgress()
    if is_prepared(path):
        with prepared_files(path, RowsRefused, _PREVIEW_OUTCOME) as files:
            return _preview_prepared(api, reference, files)
    info = api.registry_info()
    limits = DatasetLimits.from_json(info["datasets"])
    with _rows_file(path, data_format, _PREVIEW_OUTCOME) as (rows, fmt, conversion):
        images = [image.entry() for image in rows_images(rows, path.parent)]
        progress.phase("hashing", rows.stat().st_size)
        shards = plan_shards(rows, shard_size, limits, on_progress=progress.advance)
        digest = dataset_version_digest(fmt, [(shard.path, shard.sha256, shard.size) for shard in shards], images)
        found = api.uploads.preview(dataset=reference.artifact, data_format=fmt.value,
                                    shards=[shard.to_json() for shard in shards], images=images)
        lacking = set(api.images.held([i["sha256"] for i in images])["missing"]) if images else set()
        if found["digest"] != digest:  # a client and a server that cut or name versions differently
            raise Invalid(f"the registry names this version {found['digest']}, this akka {digest}",
                          hint="use the akka of the server's version" + (f", {info['version']}"
                                                                          if info.get("version") else ""))
        missing = [shard for shard, state in zip(shards, found["shards"], strict=True) if not state["held"]]
        progress.phase("checking", sum(shard.size for shard in missing))
        _check_rows(rows, fmt, missing, limits, progress, frozenset(i["path"] for i in images))
    return {
        "reference": reference.artifact,
        "format": fmt.value,
        "digest": digest,
        "existingVersion": found["existingVersion"],
        "objects": len(shards),
        "bytes": sum(shard.size for shard in shards),
        "held": len(shards) - len(missing),
        "missing": [{"path": shard.path, "sha256": shard.sha256, "bytes": shard.size} for shard in missing],
        "missingBytes": sum(shard.size for shard in missing),
        "conversion": conversion.record() if conversion else None,
        "images": len(images),
        "missingImages": [i for i in images if i["sha256"] in lacking],
    }


_PREVIEW_OUTCOME = "registering it would be refused"


@contextlib.contextmanager
def _rows_file(path: Path, data_format: str | None,
               outcome: str | None = None) -> Iterator[tuple[Path, DatasetFormat, Conversion | None]]:
    """The JSONL a registration of `path` sends, its format and the record of its conversion: the file itself
    when it holds the registry's own rows in JSONL (sent byte for byte: the same file is the same version
    everywhere), else its conversion into a temporary JSONL, removed on leaving (a file with bad rows is refused
    naming them, and `outcome` when it is not a registration's)."""
    if not path.is_file():
        raise Invalid(f"{path} is not a file")
    container, source = inspect_source(path, parse_source_format(data_format) if data_format else None)
    if container is Container.JSONL and source.native:
        yield path, DatasetFormat(source.value), None
        return
    with tempfile.TemporaryDirectory(prefix="optimize-convert-") as folder:
        converted = Path(folder) / "examples.jsonl"
        with converted.open("wb") as out:
            conversion = convert_file(path, container, source, out)
        if conversion.error_count:
            raise RowsRefused(conversion.errors, conversion.error_count, conversion.container.unit,
                              **({"outcome": outcome} if outcome else {}))
        yield converted, DatasetFormat(conversion.target), conversion


def _check_rows(path: Path, fmt: DatasetFormat, shards: list[Shard], limits: DatasetLimits,
                progress: UploadProgress, images: frozenset[str] = frozenset()) -> None:
    """Check each shard's rows as the registry checks a shard it receives (its lines numbered in the whole file),
    and refuse the file naming the first bad lines of them all."""
    errors: list[dict[str, Any]] = []
    count = 0
    for shard in shards:
        validator = JsonlValidator(fmt.kind, first_line=shard.first_line, max_line_bytes=limits.max_line_bytes,
                                   images=images)
        for chunk in _read_range(path, shard.offset, shard.size, progress.advance):
            validator.feed(chunk)
        report = validator.finish()
        errors.extend(error.to_json() for error in report.errors)
        count += report.error_count
    if count:
        raise RowsRefused(errors[:MAX_REPORTED_ERRORS], count, outcome=_PREVIEW_OUTCOME)


def convert_dataset(path: Path, to: str | None = None, data_format: str | None = None,
                    target: Path | None = None, preview: int = 3) -> dict[str, Any]:
    """Convert `path` as registration would, without a server: the record, the first rows, and with `target` the
    whole JSONL written there (atomically: a refused file writes nothing)."""
    if not path.is_file():
        raise Invalid(f"{path} is not a file")
    if target is not None and target.exists():
        raise Invalid(f"{target} exists", hint="name a new file with --out")
    container, source = inspect_source(path, parse_source_format(data_format) if data_format else None)
    if to is not None and parse_format(to).kind is not source.kind:
        words = "chat conversations" if source.kind == "chat" else "preference pairs"
        raise Invalid(f"the rows are {words} ({source.value}), which convert to "
                      f"{DatasetFormat.for_kind(source.kind).value}, not {to}",
                      hint=f"use --to {DatasetFormat.for_kind(source.kind).value}")
    partial = target.with_name(f".{target.name}.partial") if target is not None else None
    try:
        with partial.open("wb") if partial is not None else contextlib.nullcontext() as out:
            conversion = convert_file(path, container, source, out, preview=0 if target else preview)
        if conversion.error_count:
            raise RowsRefused(conversion.errors, conversion.error_count, conversion.container.unit,
                              "nothing was written")
        if partial is not None:
            partial.replace(target)
    finally:
        if partial is not None:
            partial.unlink(missing_ok=True)
    return {"file": str(path), "conversion": conversion.record(), "preview": conversion.preview,
            "written": str(target) if target is not None else None}


def _upload(api: OptimizeApi, reference: Reference, path: Path, fmt: DatasetFormat, conversion: Conversion | None,
            alias: str | None, shard_size: int | None, limits: DatasetLimits,
            progress: UploadProgress, images: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    progress.phase("hashing", path.stat().st_size)
    shards = plan_shards(path, shard_size, limits, on_progress=progress.advance)
    session = api.uploads.start(dataset=reference.artifact, data_format=fmt.value,
                                shards=[s.to_json() for s in shards],
                                conversion=conversion.record() if conversion else None, images=images)
    upload_id = session["uploadId"]
    missing = [shard for shard, state in zip(shards, session["shards"], strict=True) if not state["held"]]
    progress.phase("uploading", sum(s.size for s in missing))
    errors, error_count = _send_shards(api, upload_id, [
        (s.index, s.size, lambda s=s: _read_range(path, s.offset, s.size, progress.advance)) for s in missing],
        progress)
    if error_count:
        raise RowsRefused(errors[:MAX_REPORTED_ERRORS], error_count)
    version = api.uploads.commit(upload_id, alias=alias)
    version["upload"] = {
        "uploadId": upload_id,
        "shards": len(shards),
        "sent": len(missing),
        "alreadyHeld": len(shards) - len(missing),
    }
    return version


def _upload_prepared(api: OptimizeApi, reference: Reference, files: PreparedFiles, alias: str | None,
                     progress: UploadProgress) -> dict[str, Any]:
    """Prepared token rows: the descriptor with the session, each Parquet file the registry lacks as a shard."""
    session = api.uploads.start(dataset=reference.artifact, data_format=DatasetFormat.PREPARED.value,
                                shards=files.shards, prepared=files.descriptor.to_json())
    upload_id = session["uploadId"]
    missing = [shard for shard, state in zip(files.shards, session["shards"], strict=True) if not state["held"]]
    progress.phase("uploading", sum(s["bytes"] for s in missing))
    errors, count = _send_shards(api, upload_id, [
        (s["index"], s["bytes"], lambda s=s: _read_range(files.folder / s["path"], 0, s["bytes"], progress.advance))
        for s in missing], progress)
    if count:
        raise RowsRefused(errors[:MAX_REPORTED_ERRORS], count, "row")
    version = api.uploads.commit(upload_id, alias=alias)
    version["upload"] = {"uploadId": upload_id, "shards": len(files.shards), "sent": len(missing),
                         "alreadyHeld": len(files.shards) - len(missing)}
    return version


def _preview_prepared(api: OptimizeApi, reference: Reference, files: PreparedFiles) -> dict[str, Any]:
    """What registering prepared token rows would do: the version's digest, whether it is one already, and which
    Parquet files the registry lacks."""
    fmt = DatasetFormat.PREPARED
    digest = dataset_version_digest(fmt, [(s["path"], s["sha256"], s["bytes"]) for s in files.shards],
                                    descriptor=files.descriptor)
    found = api.uploads.preview(dataset=reference.artifact, data_format=fmt.value, shards=files.shards,
                                prepared=files.descriptor.to_json())
    if found["digest"] != digest:
        raise Invalid(f"the registry names this version {found['digest']}, this akka {digest}",
                      hint="use the akka of the server's version")
    missing = [shard for shard, state in zip(files.shards, found["shards"], strict=True) if not state["held"]]
    return {"reference": reference.artifact, "format": fmt.value, "digest": digest,
            "existingVersion": found["existingVersion"], "objects": len(files.shards),
            "bytes": sum(s["bytes"] for s in files.shards), "held": len(files.shards) - len(missing),
            "missing": [{"path": s["path"], "sha256": s["sha256"], "bytes": s["bytes"]} for s in missing],
            "missingBytes": sum(s["bytes"] for s in missing), "conversion": None, "images": 0, "missingImages": []}


def _send_shards(api: OptimizeApi, upload_id: str, shards: list[tuple[int, int, Callable[[], Iterator[bytes]]]],
                 progress: UploadProgress) -> tuple[list[dict[str, Any]], int]:
    """Send each shard (index, size, its bytes); collect row refusals from every shard so the user sees all bad
    lines at once."""
    errors: list[dict[str, Any]] = []
    count = 0
    for sent, (index, size, chunks) in enumerate(shards, start=1):
        try:
            api.uploads.send_shard(upload_id, index, chunks(), size)
        except ApiError as error:
            if "errors" not in error.body:
                raise
            errors.extend(error.body["errors"])
            count += int(error.body.get("errorCount", len(error.body["errors"])))
            continue
        progress.shard_sent(sent, len(shards), size)
        crashpoint("client.upload.after_shard")
    return errors, count


__all__ = ["DatasetFormat", "RowsRefused", "UploadProgress", "convert_dataset", "preview_dataset",
           "register_dataset"]
