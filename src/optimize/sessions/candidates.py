"""What every source's parser produces: candidates — each a chat conversation ending in the assistant answer a
curation judges, with the source's ids and what it said about the answer (`meta`) — and the counts of what it read
and skipped, or a refusal naming the line.

A candidate is checked by the registry's own chat-row rules (`chat.rows`), so what a curation keeps registers as
a chat dataset version as it is. Its normalized JSON (sorted keys, no spaces, UTF-8) is one line of the session's
content; the sha256 of those lines in order is the session hash, so the same file always gives the same hash.

Pure: no file, store or network; the parsers read lines given to them (`Lines` cuts bytes into numbered lines).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from optimize.chat.rows import RowError, RowKind, check_row

SOURCES = ("oasst1", "otel", "canonical")


class LineError(ValueError):
    """A line of the file breaks its format: its number, what is wrong, and what to change."""

    def __init__(self, line: int, message: str, hint: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.message = message
        self.hint = hint


@dataclass(frozen=True)
class Candidate:
    """One conversation to judge: `messages` as a chat row holds them (the last one the assistant's answer), the
    row's `tools` where the source names them, the source's own id for it, and `meta` (language, rank, provenance…)."""

    id: str
    messages: list[dict[str, Any]]
    meta: dict[str, Any] = field(default_factory=dict)
    tools: list[dict[str, Any]] | None = None

    def row(self) -> dict[str, Any]:
        """The chat row it would register as."""
        return {"messages": self.messages, **({"tools": self.tools} if self.tools is not None else {})}

    def document(self, source: str) -> dict[str, Any]:
        return {"id": self.id, "source": source, **self.row(), "meta": self.meta}

    def normalized(self, source: str) -> bytes:
        """Its line of the session's content (with the newline)."""
        return json.dumps(self.document(source), sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False).encode() + b"\n"


def checked(candidate: Candidate, line: int, what: str) -> Candidate:
    """The candidate, once the registry's chat-row rules take it; else the line is refused."""
    try:
        check_row(candidate.row(), RowKind.CHAT)
        candidate.normalized("")  # text a lone surrogate escape made cannot be written as UTF-8
    except RowError as error:
        raise LineError(line, f"{what} is not a conversation a chat dataset can hold: {error}",
                        hint="fix the conversation at this line, or leave it out of the file") from None
    except UnicodeEncodeError:
        raise LineError(line, f"{what} holds a lone surrogate escape (\\ud800-\\udfff), which is no text",
                        hint="write the character itself, or both halves of its surrogate pair") from None
    except RecursionError:
        raise LineError(line, f"{what} is nested too deeply to read",
                        hint="flatten the values of this line") from None
    return candidate


class Parser(ABC):
    """A source's parser: fed numbered lines in order, it answers the candidates each line completes, and at the
    end those left (a source whose conversations span lines). `records` counts what it read, `skipped` what it left
    out, by reason."""

    source: str
    records_are: str  # what `records` counts, in words

    def __init__(self) -> None:
        self.records = 0
        self.skipped: Counter[str] = Counter()

    @abstractmethod
    def line(self, number: int, text: str) -> list[Candidate]: ...

    def end(self) -> list[Candidate]:
        return []


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def json_line(number: int, text: str, holds: str) -> Any:
    """The line's JSON document; `holds` names what a line of the format holds, for the refusal."""
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise LineError(number, "the JSON document is nested too deeply to read",
                        hint=f"each line holds {holds}") from None
    except ValueError as error:
        where = f" at column {error.colno}" if isinstance(error, json.JSONDecodeError) else ""
        reason = error.msg if isinstance(error, json.JSONDecodeError) else str(error)
        raise LineError(number, f"is not JSON ({reason}{where})",
                        hint=f"each line holds {holds}, as one JSON document") from None


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(value), type(value).__name__)


class Lines:
    """Bytes cut into numbered lines of UTF-8 text as they arrive (any chunking gives the same lines); blank lines
    are numbered but not handed on, a trailing CR and a leading byte-order mark are dropped."""

    def __init__(self) -> None:
        self._pending = b""
        self._number = 0

    def feed(self, data: bytes) -> list[tuple[int, str]]:
        *complete, self._pending = (self._pending + data).split(b"\n")
        return [line for raw in complete if (line := self._decode(raw)) is not None]

    def end(self) -> list[tuple[int, str]]:
        raw, self._pending = self._pending, b""
        line = self._decode(raw) if raw else None
        return [line] if line is not None else []

    def _decode(self, raw: bytes) -> tuple[int, str] | None:
        self._number += 1
        if self._number == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        try:
            text = raw.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError as error:
            raise LineError(self._number, f"is not UTF-8 text (byte {error.start + 1} cannot be read)",
                            hint="save the file as UTF-8") from None
        return (self._number, text) if text.strip() else None


@dataclass
class Parsed:
    """A whole file parsed: its candidates in order, what was read and what was skipped."""

    candidates: list[Candidate]
    records: int
    skipped: dict[str, int]


def parse(parser: Parser, data: bytes) -> Parsed:
    """Parse a whole file held in memory (the service feeds a streamed body through the same steps)."""
    lines = Lines()
    found: list[Candidate] = []
    for number, text in [*lines.feed(data), *lines.end()]:
        found.extend(parser.line(number, text))
    found.extend(parser.end())
    return Parsed(found, parser.records, dict(sorted(parser.skipped.items())))
