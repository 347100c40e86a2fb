"""Streaming JSONL validation: feed bytes in any chunking, get every bad line named with its reason.

Memory stays bounded by the longest line allowed (`max_line_bytes`), whatever the size of the stream.
Lines are numbered from `first_line`, so a shard reports lines as numbered in the whole file. A UTF-8 byte order
mark at the start of line 1 (editors write one) is not part of the row; anywhere else it is refused as JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from optimize.chat.images import image_paths
from optimize.chat.rows import RowError, RowKind, check_row
from optimize.chat.text_checks import binary_reason, duplicate_key_reason, json_error_reason
from optimize.core.sharding import UTF8_BOM

MAX_REPORTED_ERRORS = 20


@dataclass(frozen=True, slots=True)
class LineError:
    line: int
    reason: str

    def to_json(self) -> dict[str, object]:
        return {"line": self.line, "reason": self.reason}

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


@dataclass(slots=True)
class ValidationReport:
    """Counts of a validated stream, and its first errors (up to MAX_REPORTED_ERRORS) with the total."""

    rows: int = 0
    tool_rows: int = 0
    lines: int = 0
    errors: list[LineError] = field(default_factory=list)
    error_count: int = 0

    @property
    def ok(self) -> bool:
        return self.error_count == 0

    def add_error(self, line: int, reason: str) -> None:
        self.error_count += 1
        if len(self.errors) < MAX_REPORTED_ERRORS:
            self.errors.append(LineError(line, reason))


class JsonlValidator:
    """Validates rows of one kind as bytes arrive; call `feed` with chunks, then `finish`."""

    def __init__(self, kind: RowKind, *, first_line: int = 1, max_line_bytes: int = 32 * 1024 * 1024,
                 images: frozenset[str] = frozenset()) -> None:
        self.kind = kind
        self.images = images  # the image paths the version names (each row's image parts must be among them)
        self.max_line_bytes = max_line_bytes
        self.report = ValidationReport()
        self._next_line = first_line
        self._partial = bytearray()
        self._skipping_long_line = False
        self._at_start = first_line == 1  # the file's first bytes: told apart from a compressed or binary file
        self._not_text = False

    def feed(self, chunk: bytes) -> None:
        if self._at_start and chunk:
            self._at_start = False
            reason = binary_reason(chunk[:4096])
            if reason is not None:
                self._not_text = True
                self.report.add_error(self._next_line, f"the file {reason}")
        if self._not_text:
            return  # refused whole: its bytes are no lines
        start = 0
        while True:
            newline = chunk.find(b"\n", start)
            if newline < 0:
                self._keep_partial(chunk[start:])
                return
            if self._partial or self._skipping_long_line:
                self._keep_partial(chunk[start:newline])
                self._end_line(bytes(self._partial))
                self._partial.clear()
            else:
                self._end_line(chunk[start:newline])
            start = newline + 1

    def finish(self) -> ValidationReport:
        if self._not_text:
            return self.report
        if self._partial or self._skipping_long_line:
            self._end_line(bytes(self._partial))
            self._partial.clear()
        return self.report

    def _keep_partial(self, piece: bytes) -> None:
        if self._skipping_long_line:
            return
        if len(self._partial) + len(piece) > self.max_line_bytes:
            # Stop buffering: the line is refused anyway, and memory must stay bounded.
            self._skipping_long_line = True
            self._partial.clear()
            return
        self._partial += piece

    def _end_line(self, line: bytes) -> None:
        number = self._next_line
        self._next_line += 1
        self.report.lines += 1
        if self._skipping_long_line:
            self._skipping_long_line = False
            self.report.add_error(
                number, f"the line is longer than the limit of {self.max_line_bytes} bytes; shorten the row"
            )
            return
        if len(line) > self.max_line_bytes:
            self.report.add_error(
                number, f"the line is longer than the limit of {self.max_line_bytes} bytes; shorten the row"
            )
            return
        self.check_line(number, line)

    def check_line(self, number: int, line: bytes) -> None:
        if number == 1:
            line = line.removeprefix(UTF8_BOM)
        if not line.strip():
            self.report.add_error(number, "the line is empty; every line must hold one JSON object")
            return
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError as error:
            self.report.add_error(number, json_error_reason(line, error))
            return
        duplicate = duplicate_key_reason(line, row)
        if duplicate is not None:
            self.report.add_error(number, duplicate)
            return
        try:
            facts = check_row(row, self.kind)
        except RowError as error:
            self.report.add_error(number, str(error))
            return
        unsent = next((path for path in image_paths(row) if path not in self.images), None)
        if unsent is not None:
            self.report.add_error(number, f"image {unsent} is not among the images the upload sends; register the "
                                          "file with akka registry datasets register, which sends the images its "
                                          "rows name")
            return
        self.report.rows += 1
        self.report.tool_rows += facts.offers_tools
