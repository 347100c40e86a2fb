"""The resumable, sharded dataset upload behind `registry datasets register` (its calls are api.py's)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optimize.chat.formats import DatasetFormat, detect_format, parse_format
from optimize.client.api import OptimizeApi
from optimize.client.http import ApiError, OptimizeClient
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


@dataclass
class RowsRefused(Exception):
    """The server refused rows of the file; lists the first of them and the count."""

    errors: list[dict[str, Any]] = field(default_factory=list)
    count: int = 0

    def __str__(self) -> str:
        return f"the file has {self.count} bad line(s); nothing was registered"


def _first_line(path: Path, limit: int) -> bytes:
    with path.open("rb") as handle:
        line = handle.readline(limit)
    return line


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
    """Cut, hash and send `path` as a version of `reference`, sending only shards the registry lacks."""
    api = OptimizeApi.over(client)
    progress = progress or UploadProgress()
    limits = DatasetLimits.from_json(api.registry_info()["datasets"])
    if not path.is_file():
        raise Invalid(f"{path} is not a file")
    fmt = parse_format(data_format) if data_format else detect_format(_first_line(path, limits.max_line_bytes))
    progress.phase("hashing", path.stat().st_size)
    shards = plan_shards(path, shard_size, limits, on_progress=progress.advance)
    session = api.uploads.start(dataset=reference.artifact, data_format=fmt.value,
                                shards=[s.to_json() for s in shards])
    upload_id = session["uploadId"]
    missing = [shard for shard, state in zip(shards, session["shards"], strict=True) if not state["held"]]
    progress.phase("uploading", sum(s.size for s in missing))
    errors, error_count = _send_shards(api, path, upload_id, missing, progress)
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


def _send_shards(
    api: OptimizeApi, path: Path, upload_id: str, shards: list[Shard], progress: UploadProgress
) -> tuple[list[dict[str, Any]], int]:
    """Send each shard; collect row refusals from every shard so the user sees all bad lines at once."""
    errors: list[dict[str, Any]] = []
    count = 0
    for shard in shards:
        try:
            chunks = _read_range(path, shard.offset, shard.size, progress.advance)
            api.uploads.send_shard(upload_id, shard.index, chunks, shard.size)
        except ApiError as error:
            if "errors" not in error.body:
                raise
            errors.extend(error.body["errors"])
            count += int(error.body.get("errorCount", len(error.body["errors"])))
            continue
        crashpoint("client.upload.after_shard")
    return errors, count


__all__ = ["DatasetFormat", "RowsRefused", "UploadProgress", "register_dataset"]
