"""Dataset version formats and which row kind each holds; detection from a file's first row."""

from __future__ import annotations

from enum import StrEnum

import orjson

from optimize.chat.rows import RowKind, detect_kind
from optimize.core.errors import Invalid


class DatasetFormat(StrEnum):
    CHAT = "chat-jsonl-v1"
    PREFERENCE = "preference-jsonl-v1"

    @property
    def kind(self) -> RowKind:
        return RowKind.CHAT if self is DatasetFormat.CHAT else RowKind.PREFERENCE

    @classmethod
    def for_kind(cls, kind: str) -> DatasetFormat:
        return cls.CHAT if kind == RowKind.CHAT else cls.PREFERENCE


def parse_format(text: str) -> DatasetFormat:
    try:
        return DatasetFormat(text)
    except ValueError:
        choices = ", ".join(f.value for f in DatasetFormat)
        raise Invalid(f"format {text!r} is not known", hint=f"use one of {choices}") from None


def detect_format(first_line: bytes) -> DatasetFormat:
    """The format a file's first row shows: `messages` is chat, `prompt`/`chosen`/`rejected` a pair."""
    try:
        row = orjson.loads(first_line)
    except orjson.JSONDecodeError as error:
        raise Invalid(f"line 1: not valid JSON ({error})", hint="each line must hold one JSON object") from None
    kind = detect_kind(row)
    if kind is None:
        raise Invalid(
            "line 1 is neither a chat row (with 'messages') nor a preference pair (with 'prompt', 'chosen' "
            "and 'rejected'), so the format cannot be detected",
            hint="fix the row, or state the format with --format chat-jsonl-v1|preference-jsonl-v1",
        )
    return DatasetFormat.for_kind(kind)
