"""Reading a file of rows in any container (JSONL, a JSON array, Parquet) and converting it, row by row, into
the registry's JSONL with the conversion's record.

The container is told by the file's leading bytes (`PAR1` is Parquet, `[` a JSON array), never by its name.
Rows are numbered as the user sees them: lines of a JSONL file, rows (from 1) of an array or a Parquet file; every
refusal keeps that number. Parquet gives every row the columns of the whole file, so a field a row does not have
reads as null: those nulls are dropped (a rule the record names) rather than read as values. A UTF-8 byte order
mark at the start of a JSONL file or a JSON array (editors write one) is not part of the rows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import IO, Any

import orjson

from optimize.chat.rows import RowError, check_row
from optimize.chat.sources import SourceFormat, convert_row, detect_source, undetected_reason
from optimize.chat.text_checks import (
    binary_reason,
    duplicate_key_reason,
    duplicate_keys_by_row,
    json_error_reason,
)
from optimize.core.errors import Invalid
from optimize.core.sharding import UTF8_BOM, leading_bom

MAX_REPORTED_ERRORS = 20
MAX_JSON_ARRAY_BYTES = 2 * 1024**3  # an array is read whole; a larger file converts to JSONL first
_PARQUET_BATCH = 1024
_DROPPED_NULLS = "null fields of Parquet's shared columns dropped"
_NOT_TEXT_HINT = "register a JSONL file, a JSON array or a Parquet file (UTF-8 text, uncompressed)"


class Container(StrEnum):
    JSONL = "jsonl"
    JSON_ARRAY = "json-array"
    PARQUET = "parquet"

    @property
    def unit(self) -> str:
        return "line" if self is Container.JSONL else "row"


def detect_container(path: Path) -> Container:
    """The container the file's leading bytes show; a compressed, archived or binary file is refused as such."""
    with path.open("rb") as handle:
        head = handle.read(4096)
        whole = not handle.read(1)
    if head.startswith(b"PAR1"):
        return Container.PARQUET
    reason = binary_reason(head, whole)
    if reason is not None:
        raise Invalid(f"{path} {reason}", hint=_NOT_TEXT_HINT)
    if head.removeprefix(UTF8_BOM).lstrip(b" \t\r\n").startswith(b"["):
        return Container.JSON_ARRAY
    return Container.JSONL


@dataclass(frozen=True, slots=True)
class SourceRow:
    """A row as read (`row`), or why it could not be read (`error`), at its position."""

    position: int
    row: Any = None
    error: str | None = None
    dropped_nulls: bool = False


def read_rows(path: Path, container: Container) -> Iterator[SourceRow]:
    if container is Container.PARQUET:
        yield from _parquet_rows(path)
    elif container is Container.JSON_ARRAY:
        yield from _array_rows(path)
    else:
        yield from _jsonl_rows(path)


def _jsonl_rows(path: Path) -> Iterator[SourceRow]:
    with path.open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            if number == 1:
                line = line.removeprefix(UTF8_BOM)
            if not line.strip():
                yield SourceRow(number, error="the line is empty; every line must hold one JSON object")
                continue
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError as error:
                yield SourceRow(number, error=json_error_reason(line, error))
                continue
            duplicate = duplicate_key_reason(line, row)
            yield SourceRow(number, error=duplicate) if duplicate else SourceRow(number, row)


def _array_rows(path: Path) -> Iterator[SourceRow]:
    size = path.stat().st_size
    if size > MAX_JSON_ARRAY_BYTES:
        raise Invalid(f"{path} is a JSON array of {size} bytes; arrays are read whole, up to "
                      f"{MAX_JSON_ARRAY_BYTES} bytes", hint="write the rows as JSONL, one per line")
    try:
        text = path.read_bytes().removeprefix(UTF8_BOM)
        rows = orjson.loads(text)
    except orjson.JSONDecodeError as error:
        raise Invalid(f"{path} starts like a JSON array but is not valid JSON ({error})",
                      hint="fix the file, or write the rows as JSONL, one per line") from None
    if not isinstance(rows, list):
        raise Invalid(f"{path} is not a JSON array of rows")
    duplicates = duplicate_keys_by_row(text, rows)
    for number, row in enumerate(rows, start=1):
        reason = duplicates.get(number - 1)
        yield SourceRow(number, error=reason) if reason else SourceRow(number, row)


def _parquet_rows(path: Path) -> Iterator[SourceRow]:
    try:
        import pyarrow.parquet as parquet
    except ImportError:
        raise Invalid("reading Parquet needs pyarrow, which is not installed",
                      hint="pip install pyarrow, or write the rows as JSONL") from None
    try:
        handle = parquet.ParquetFile(path)
    except Exception as error:  # noqa: BLE001 - pyarrow raises several kinds for a damaged file
        raise Invalid(f"{path} starts like Parquet but cannot be read ({error})") from None
    number = 0
    for batch in handle.iter_batches(batch_size=_PARQUET_BATCH):
        for row in batch.to_pylist():
            number += 1
            cleaned = _without_nulls(row)
            yield SourceRow(number, cleaned, dropped_nulls=cleaned != row)


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_without_nulls(item) for item in value]
    return value


@dataclass
class Conversion:
    """What converting a file did: its source format and container, the rows written, the rules applied (with
    how many rows each touched), and the first refusals with their count."""

    source: SourceFormat
    container: Container
    rows: int = 0
    rules: Counter[str] = field(default_factory=Counter)
    errors: list[dict[str, Any]] = field(default_factory=list)
    error_count: int = 0
    preview: list[dict[str, Any]] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        """Whether the registered rows differ from the file's bytes (a native JSONL file is sent as it is)."""
        return not (self.container is Container.JSONL and self.source.native and not self.rules)

    @property
    def target(self) -> str:
        return SourceFormat.CHAT.value if self.source.kind == "chat" else SourceFormat.PREFERENCE.value

    def refuse(self, position: int, reason: str) -> None:
        self.error_count += 1
        if len(self.errors) < MAX_REPORTED_ERRORS:
            self.errors.append({self.container.unit: position, "reason": reason})

    def record(self) -> dict[str, Any]:
        """The record the version keeps."""
        return {
            "sourceFormat": self.source.value,
            "container": self.container.value,
            "format": self.target,
            "rows": self.rows,
            "rules": [{"rule": rule, "rows": count} for rule, count in self.rules.items()],
        }


def inspect_source(path: Path, stated: SourceFormat | None = None) -> tuple[Container, SourceFormat]:
    """The file's container and source format (the stated one, or what its first readable row shows)."""
    if path.stat().st_size == leading_bom(path):
        raise Invalid(f"{path}: the file is empty", hint="a dataset version holds at least one example")
    container = detect_container(path)
    if stated is not None:
        return container, stated
    for item in read_rows(path, container):
        if item.error is not None:
            raise Invalid(f"{container.unit} {item.position}: {item.error}",
                          hint="fix the row, or state the format with --format")
        source = detect_source(item.row)
        if source is None:
            text = isinstance(item.row, dict) and "text" in item.row
            raise Invalid(f"{container.unit} {item.position}: {undetected_reason(item.row)}",
                          hint=None if text else "fix the rows, or state the format with --format")
        return container, source
    raise Invalid(f"{path} holds no rows", hint="a dataset version holds at least one row")


def convert_file(path: Path, container: Container, source: SourceFormat, out: IO[bytes] | None,
                 preview: int = 0) -> Conversion:
    """Convert every row, check it as the registry will, and write the valid ones to `out` as JSONL."""
    conversion = Conversion(source, container)
    for item in read_rows(path, container):
        if item.error is not None:
            conversion.refuse(item.position, item.error)
            continue
        try:
            row, rules = convert_row(item.row, source)
            check_row(row, source.kind)
        except RowError as error:
            conversion.refuse(item.position, str(error))
            continue
        if item.dropped_nulls:
            rules = [*rules, _DROPPED_NULLS]
        conversion.rows += 1
        conversion.rules.update(rules)
        if out is not None:
            out.write(orjson.dumps(row) + b"\n")
        if len(conversion.preview) < preview:
            conversion.preview.append(row)
    if conversion.rows == 0 and conversion.error_count == 0:
        raise Invalid(f"{path} holds no rows", hint="a dataset version holds at least one row")
    return conversion
