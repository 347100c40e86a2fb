"""The kinds of value an `OPTIMIZE_*` setting holds: how its text is read, what it allows, and how a value is shown.

A kind's `parse` takes the variable's text (already stripped, never empty) and returns the typed value, or raises
ValueError whose text says what is wrong where more can be said than what is allowed (a JSON document's error).
`allowed` is the phrase refusals, `akka server settings` and the settings page use: "a whole number above 0".
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


@dataclass(frozen=True, slots=True)
class Whole:
    """A whole number above 0 (or at least 0, with `zero_allowed`)."""

    zero_allowed: bool = False
    label: str = "int"

    def allowed(self) -> str:
        return "a whole number of at least 0" if self.zero_allowed else "a whole number above 0"

    def parse(self, text: str) -> int:
        value = int(text)  # "1.5" and "1e9" are refused: a count is written as one
        if value < 0 or (value == 0 and not self.zero_allowed):
            raise ValueError("out of bounds")
        return value

    def show(self, value: int) -> str:
        return str(value)


@dataclass(frozen=True, slots=True)
class Number:
    """A finite number above 0 (or at least 0, with `zero_allowed`); `what` names it: "a number of seconds"."""

    what: str = "a number"
    zero_allowed: bool = False
    label: str = "float"

    def allowed(self) -> str:
        return f"{self.what} of at least 0" if self.zero_allowed else f"{self.what} above 0"

    def parse(self, text: str) -> float:
        value = float(text)
        if not math.isfinite(value) or value < 0 or (value == 0 and not self.zero_allowed):
            raise ValueError("out of bounds")
        return value

    def show(self, value: float) -> str:
        return f"{value:g}"


@dataclass(frozen=True, slots=True)
class Flag:
    """On or off: 1, true, yes, on or 0, false, no, off (in any case)."""

    label: str = "bool"

    def allowed(self) -> str:
        return f"one of {', '.join(TRUE_WORDS + FALSE_WORDS)}"

    def parse(self, text: str) -> bool:
        word = text.lower()
        if word not in TRUE_WORDS + FALSE_WORDS:
            raise ValueError("neither on nor off")
        return word in TRUE_WORDS

    def show(self, value: bool) -> str:
        return "on" if value else "off"


@dataclass(frozen=True, slots=True)
class Choice:
    """One of a few words, as written (the log level in lower case)."""

    options: tuple[str, ...]
    label: str = "enum"

    def allowed(self) -> str:
        return f"one of {', '.join(self.options)}"

    def parse(self, text: str) -> str:
        if text not in self.options:
            raise ValueError("not an option")
        return text

    def show(self, value: str) -> str:
        return value


@dataclass(frozen=True, slots=True)
class Text:
    """Free text; `check` (raising the platform's own refusal) where the text has a form of its own, `described`
    saying that form."""

    described: str = "any text"
    check: Callable[[str], Any] | None = None
    label: str = "str"

    def allowed(self) -> str:
        return self.described

    def parse(self, text: str) -> str:
        if self.check is not None:
            self.check(text)
        return text

    def show(self, value: str) -> str:
        return value


@dataclass(frozen=True, slots=True)
class FilePath:
    """A file or folder; `~` is the user's home."""

    label: str = "path"

    def allowed(self) -> str:
        return "a path"

    def parse(self, text: str) -> Path:
        return Path(text).expanduser()

    def show(self, value: Path) -> str:
        return str(value)


@dataclass(frozen=True, slots=True)
class Listing:
    """Several items separated by `separator` (blank items skipped): paths resolved (`paths`) or words, lower-cased
    where case means nothing (`lower`)."""

    separator: str = ","
    paths: bool = False
    lower: bool = False
    label: str = "list"

    def allowed(self) -> str:
        what = "paths" if self.paths else "items"
        where = "the path separator" if self.separator == os.pathsep else f"{self.separator!r}"
        return f"{what} separated by {where}"

    def parse(self, text: str) -> tuple[Any, ...]:
        parts = [part.strip() for part in text.split(self.separator) if part.strip()]
        if self.paths:
            return tuple(Path(part).expanduser().resolve() for part in parts)
        return tuple(part.lower() if self.lower else part for part in parts)

    def show(self, value: Sequence[Any]) -> str:
        return self.separator.join(str(item) for item in value)


@dataclass(frozen=True, slots=True)
class JsonObject:
    """A JSON object; `maps` says what it maps to what ("project names to quotas")."""

    maps: str
    label: str = "json"

    def allowed(self) -> str:
        return f"a JSON object mapping {self.maps}"

    def parse(self, text: str) -> dict[str, Any]:
        try:
            document = json.loads(text)
        except ValueError as error:
            raise ValueError(f"is not JSON: {error}") from None
        if not isinstance(document, dict):
            raise ValueError(f"must map {self.maps}")
        return document

    def show(self, value: dict[str, Any]) -> str:
        return json.dumps(value, separators=(",", ":"))


Kind = Whole | Number | Flag | Choice | Text | FilePath | Listing | JsonObject
