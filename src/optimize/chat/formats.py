"""Dataset version formats (what the registry holds) and which row kind each holds."""

from __future__ import annotations

from enum import StrEnum
from typing import TypeVar

from optimize.chat.rows import RowKind
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


F = TypeVar("F", bound=StrEnum)


def parse_format(text: str) -> DatasetFormat:
    return parse_named(DatasetFormat, text)


def parse_named(formats: type[F], text: str) -> F:
    """The format `text` names among `formats`, or a refusal listing them."""
    try:
        return formats(text)
    except ValueError:
        choices = ", ".join(f.value for f in formats)
        raise Invalid(f"format {text!r} is not known", hint=f"use one of {choices}") from None
