"""Dataset version formats (what the registry holds) and which row kind each holds."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, TypeVar

from optimize.chat.prepared import Descriptor
from optimize.chat.rows import RowKind
from optimize.core.digests import version_digest
from optimize.core.errors import Invalid


class DatasetFormat(StrEnum):
    CHAT = "chat-jsonl-v1"
    PREFERENCE = "preference-jsonl-v1"
    PREPARED = "prepared-tokens-v1"  # Parquet files of token ids and loss masks, with a descriptor (chat/prepared)

    @property
    def kind(self) -> RowKind:
        return _KINDS[self]

    @property
    def jsonl(self) -> bool:
        """Whether its objects are JSONL shards of rows (prepared token rows are Parquet files)."""
        return self is not DatasetFormat.PREPARED

    @classmethod
    def for_kind(cls, kind: str) -> DatasetFormat:
        return next(f for f, k in _KINDS.items() if k == kind)


_KINDS = {DatasetFormat.CHAT: RowKind.CHAT, DatasetFormat.PREFERENCE: RowKind.PREFERENCE,
          DatasetFormat.PREPARED: RowKind.PREPARED}


def dataset_version_digest(data_format: DatasetFormat, objects: list[tuple[str, str, int]],
                           images: list[dict[str, Any]] | None = None, descriptor: Descriptor | None = None) -> str:
    """The digest of a version of these objects (path, sha256, bytes), the same on the client and in the registry:
    each image its rows name counts as one more object (`image:PATH`), so the same rows over other pictures are
    another version, and so does a prepared version's descriptor."""
    listed = list(objects) + [(f"image:{i['path']}", i["sha256"], i["bytes"]) for i in images or []]
    return version_digest(data_format, listed + ([descriptor.digest_entry()] if descriptor else []))


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
