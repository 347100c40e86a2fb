"""What JSON parsing alone lets through or words badly, checked where rows are read (the client's source files,
the server's shard validation), with the same words on both sides.

- A file that is not text: compressed or archived (gzip, zip, …) is refused as such ("looks like gzip; decompress
  it first"), other binary or non-UTF-8 bytes as "is not text", never as a JSON or UTF-8 surrogate error.
- A row with a key twice in one object: JSON readers keep only one of them (orjson the last), so the row would not
  mean what its bytes say; it is refused by line, naming the key.

The duplicate check stays off the slow path for almost every row: a JSON text holds one `:` outside strings per
key, so when the line holds as many `:` as the parsed row written again, no key was dropped; only a line where it
does not (or that escapes a colon as `\\u003a`) is parsed again key by key.
"""

from __future__ import annotations

import codecs
import json
from typing import Any

import orjson

_ARCHIVES = (
    (b"\x1f\x8b", "gzip"), (b"BZh", "bzip2"), (b"\xfd7zXZ\x00", "xz"), (b"\x28\xb5\x2f\xfd", "zstd"),
    (b"7z\xbc\xaf\x27\x1c", "7z"),
)
_ZIP = (b"PK\x03\x04", b"PK\x05\x06")
_UTF16 = (b"\xff\xfe", b"\xfe\xff")
_NOT_TEXT_HINT = "a dataset file is UTF-8 text: JSONL, a JSON array, or Parquet"


def binary_reason(head: bytes, whole: bool = False) -> str | None:
    """Why a file whose first bytes are `head` is no text file of rows (`whole`: head is the entire file), as the
    rest of a sentence naming the file; None when it may be one."""
    for magic, name in _ARCHIVES:
        if head.startswith(magic):
            return f"looks like {name}; decompress it first"
    if head.startswith(_ZIP):
        return "looks like a zip archive; extract the dataset file from it first"
    if head.startswith(_UTF16):
        return "is UTF-16 text; save it as UTF-8"
    if b"\x00" in head:
        return f"is not text (it holds NUL bytes); {_NOT_TEXT_HINT}"
    if head.removeprefix(b"\xef\xbb\xbf").lstrip(b" \t\r\n")[:1] in (b"{", b"["):
        return None  # starts as rows do: a byte that is not UTF-8 is refused with its line
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=whole)  # a character cut at the end is fine
    except UnicodeDecodeError as error:
        return f"is not text (byte 0x{head[error.start]:02x} at offset {error.start} is not UTF-8); {_NOT_TEXT_HINT}"
    return None


def json_error_reason(line: bytes, error: Exception) -> str:
    """A line's refusal when it does not parse as JSON: bytes that are not UTF-8 say so, with where."""
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as bad:
        return (f"not UTF-8 text (byte 0x{line[bad.start]:02x} at column {bad.start + 1}); save the file as UTF-8")
    return f"not valid JSON ({error})"


def duplicate_key_reason(line: bytes, row: Any) -> str | None:
    """Why the parsed `row` of `line` is refused for a key given twice in one object, or None."""
    if not _may_hold_duplicates(line, row):
        return None  # every key of the text is in the row: none was dropped
    key = _first_duplicate(line)
    return None if key is None else _reason(key)


def duplicate_keys_by_row(text: bytes, rows: list[Any]) -> dict[int, str]:
    """{index: reason} of the rows of a JSON array (`text`, parsed as `rows`) that give a key twice in one object."""
    if not _may_hold_duplicates(text, rows):
        return {}
    found: dict[int, str] = {}  # id of a parsed object -> its first duplicated key

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        made = dict(items)
        if len(made) != len(items):
            seen: set[str] = set()
            for key, _ in items:
                if key in seen:
                    found[id(made)] = key
                    break
                seen.add(key)
        return made

    try:
        parsed = json.loads(text, object_pairs_hook=pairs)
    except (ValueError, RecursionError):
        return {}
    if not found or not isinstance(parsed, list):
        return {}
    reasons = {}
    for index, row in enumerate(parsed):
        key = next((found[id(item)] for item in _objects(row) if id(item) in found), None)
        if key is not None:
            reasons[index] = _reason(key)
    return reasons


def _may_hold_duplicates(text: bytes, value: Any) -> bool:
    """Whether keys may have been dropped parsing `text` into `value`. The text holds a `:` after each of its keys
    and the `:` of its strings; `value` written again (orjson escapes no colon) holds one after each key it kept and
    the same string colons, unless the text escaped a colon (`\\u003a`) or a dropped member held some."""
    if b"\\u003" in text:
        return True
    try:
        return text.count(b":") != orjson.dumps(value).count(b":")
    except orjson.JSONEncodeError:  # nested deeper than orjson writes: check key by key
        return True


def _reason(key: str) -> str:
    return (f"the key {json.dumps(key)} appears twice in one object; JSON readers keep only one of them, so "
            "remove the other")


def _objects(value: Any):
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(v for v in item.values() if isinstance(v, dict | list))
        elif isinstance(item, list):
            stack.extend(v for v in item if isinstance(v, dict | list))


class _Duplicate(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise _Duplicate(key)
        seen.add(key)
    return dict(pairs)


def _first_duplicate(line: bytes) -> str | None:
    try:
        json.loads(line, object_pairs_hook=_pairs)
    except _Duplicate as found:
        return found.key
    except (ValueError, RecursionError):
        return None
    return None


__all__ = ["binary_reason", "duplicate_key_reason", "duplicate_keys_by_row", "json_error_reason"]
