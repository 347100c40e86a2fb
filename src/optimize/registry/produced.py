"""Rows a job produced (a distillation's accepted answers), registered as a version of a dataset, with lineage.

The rows go the way an upload goes, in process: written as JSONL (one `json.dumps(row, ensure_ascii=False)` a
line), cut into shards by the same cutter the CLI uses (`core/sharding.py`), and driven through the upload session
functions of `registry/uploads.py` — `create_upload` (reference, namespace open and not archived, the dataset's
kind, quotas), `receive_shard` (every row checked by the row rules as it streams, the shard stored under its sha256
in the blob store) and `commit_upload` (the version, its aliases). So the same rows give the same digest, the
same version, and the same version as the same JSONL file registered with `akka registry datasets register`.

The version records its `lineage` (what produced it: `producedBy` {kind, id}, and for a distillation `teacher`
{reference, commit} and `source` {reference, digest}) when this registration creates it; rows registered before
return the version they already are, its lineage as it was. A row the registry refuses raises the refusal an
upload gets (`Invalid`, its `errors` naming each bad line, `errorCount`) and registers nothing.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optimize.chat.formats import DatasetFormat
from optimize.chat.jsonl import MAX_REPORTED_ERRORS
from optimize.chat.rows import RowKind, detect_kind
from optimize.core.errors import Invalid
from optimize.core.refs import parse_reference
from optimize.core.sharding import Shard, plan_shards
from optimize.registry.datasets import find_dataset
from optimize.registry.uploads import Registry, commit_upload, create_upload, receive_shard
from optimize.schemas.registry import CommittedVersion

_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class Produced:
    """Rows registered: the version (as a commit answers it, `lineage` and `created` included), how many rows, and
    how the upload went (its session, its shards, those sent now and those the registry held already)."""

    version: CommittedVersion
    rows: int
    upload_id: str
    shards: int
    sent: int

    @property
    def already_held(self) -> int:
        return self.shards - self.sent


def register_rows(
    registry: Registry,
    reference: str,
    rows: list[dict],
    lineage: dict[str, Any],
    alias: str | None = None,
) -> Produced:
    """Register `rows` as a version of the dataset `reference` (NS/NAME), recording `lineage` on the version it
    creates (`created` is false when the same rows were already that version)."""
    lineage = _checked_lineage(lineage)
    target = _target(reference)
    if not rows:
        raise Invalid(f"there are no rows to register as a version of {target.artifact}",
                      hint="a dataset version holds at least one row")
    data_format = _format(registry, target.namespace, target.name, rows[0])
    with tempfile.TemporaryDirectory(prefix="optimize-produced-") as folder:
        path = Path(folder) / "examples.jsonl"
        _write_jsonl(path, rows)
        return register_file(registry, reference, path, data_format, rows=len(rows), lineage=lineage, alias=alias)


def register_file(
    registry: Registry,
    reference: str,
    path: Path,
    data_format: DatasetFormat,
    *,
    rows: int,
    conversion: dict[str, Any] | None = None,
    lineage: dict[str, Any] | None = None,
    alias: str | None = None,
) -> Produced:
    """Register the registry's JSONL rows in `path` (`rows` of them) as a version of the dataset `reference`, with
    the record of the conversion that wrote them from a file of another format, if one did."""
    target = _target(reference)
    shards = plan_shards(path, None, registry.limits)
    body: dict[str, Any] = {"dataset": target.artifact, "format": data_format.value,
                            "shards": [shard.to_json() for shard in shards]}
    if conversion is not None:
        body["conversion"] = conversion
    session = create_upload(registry, body)
    upload_id = session.upload_id
    errors: list[dict[str, Any]] = []
    error_count = sent = 0
    for shard, state in zip(shards, session.shards, strict=True):
        if state.held:
            continue
        try:
            received = receive_shard(registry, upload_id, shard.index, _read(path, shard))
        except Invalid as refusal:
            if "errors" not in refusal.details:
                raise
            # Go on with the other shards, as the CLI does, so the refusal names every bad line at once.
            errors.extend(refusal.details["errors"])
            error_count += int(refusal.details.get("errorCount", len(refusal.details["errors"])))
            continue
        sent += 0 if received.already_held else 1
    if error_count:
        first = errors[0]
        raise Invalid(
            f"{error_count} row(s) break the registry's rules; nothing was registered as a version of "
            f"{target.artifact} (line {first['line']}: {first['reason']})",
            hint="fix the lines named and register the rows again",
            errors=errors[:MAX_REPORTED_ERRORS],
            errorCount=error_count,
        )
    return Produced(commit_upload(registry, upload_id, alias, lineage=lineage), rows, upload_id, len(shards), sent)


def _target(reference: str):
    target = parse_reference(reference)
    if target.selector != "latest":
        raise Invalid(f"register into {target.artifact}, without a version or alias")
    return target


def _checked_lineage(lineage: Any) -> dict[str, Any]:
    """The lineage as the version will keep it: a JSON object (a copy, so the caller's dict is not shared)."""
    if not isinstance(lineage, dict):
        raise Invalid(f"a version's lineage is a JSON object, not {type(lineage).__name__}")
    try:
        return json.loads(json.dumps(lineage, allow_nan=False))
    except (TypeError, ValueError) as error:
        raise Invalid(f"the lineage cannot be kept as JSON: {error}") from None


def _format(registry: Registry, namespace: str, name: str, first: Any) -> DatasetFormat:
    """The rows' format, detected from the first row as the CLI detects a file's; a row that looks like neither
    kind takes the target dataset's kind (chat for a new dataset), and the row rules name what is wrong with it."""
    kind = detect_kind(first)
    if kind is None:
        with registry.store.transaction() as session:
            dataset = find_dataset(session, namespace, name)
        kind = RowKind(dataset.kind) if dataset is not None else RowKind.CHAT
    return DatasetFormat.for_kind(kind)


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    """One row a line, in order; a row that cannot be written as JSON text is refused by its line."""
    with path.open("wb") as out:
        for line, row in enumerate(rows, start=1):
            try:
                text = json.dumps(row, ensure_ascii=False)
                out.write(text.encode("utf-8") + b"\n")
            except (TypeError, ValueError) as error:  # not JSON (a set, bytes), or a lone surrogate
                reason = f"the row cannot be written as JSON: {error}"
                raise Invalid(f"1 row(s) break the registry's rules; nothing was registered (line {line}: {reason})",
                              hint="fix the lines named and register the rows again",
                              errors=[{"line": line, "reason": reason}], errorCount=1) from None


def _read(path: Path, shard: Shard) -> Iterator[bytes]:
    with path.open("rb") as handle:
        handle.seek(shard.offset)
        remaining = shard.size
        while remaining:
            chunk = handle.read(min(_CHUNK, remaining))
            if not chunk:
                raise Invalid(f"the rows' file ended before shard {shard.index} did", hint="register the rows again")
            remaining -= len(chunk)
            yield chunk


__all__ = ["Produced", "register_file", "register_rows"]
