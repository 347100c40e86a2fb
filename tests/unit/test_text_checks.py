"""Rows with a key given twice are refused by line (client and server alike, JSONL and JSON arrays), a compressed
or binary file is refused as such rather than as a JSON or surrogate error, and text the CLI prints has terminal
control sequences escaped."""

from __future__ import annotations

import gzip
import io
import json
import re
import zipfile

import pytest

from optimize.chat.jsonl import JsonlValidator
from optimize.chat.rows import RowKind
from optimize.chat.source_files import convert_file, detect_container, inspect_source
from optimize.chat.sources import SourceFormat
from optimize.chat.text_checks import binary_reason, duplicate_key_reason, duplicate_keys_by_row
from optimize.core.errors import Invalid

GOOD = ('{"messages": [{"role": "user", "content": "at 10:30, see http://x.org"}, '
        '{"role": "assistant", "content": "ok"}]}')
TWICE = '{"messages": [{"role": "user", "content": "a", "content": "b"}, {"role": "assistant", "content": "ok"}]}'


def _validate(data: bytes, **kwargs):
    validator = JsonlValidator(RowKind.CHAT, **kwargs)
    validator.feed(data)
    return validator.finish()


@pytest.mark.parametrize("line", [
    TWICE,
    '{"messages": [], "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}',
    '{"messages": [{"role": "user", "content": "q:", "\\u0063ontent": "r"}]}',  # the same key, spelled escaped
    '{"messages": [{"role": "user", "content": "\\u003a", "content": "r"}]}',  # an escaped colon: the slow path
])
def test_a_key_given_twice_is_found(line):
    reason = duplicate_key_reason(line.encode(), json.loads(line))
    assert reason is not None and "appears twice in one object" in reason


@pytest.mark.parametrize("line", [
    GOOD,
    '{"a": "x:y", "b": {"c:d": ["e:", {"f": ":"}]}, "g": 1}',
    '{"a": "\\u003a", "b": "\\u003A"}',
    '{"a": {"k": 1}, "b": {"k": 2}}',  # the same key in two objects is no duplicate
])
def test_rows_without_duplicates_pass(line):
    assert duplicate_key_reason(line.encode(), json.loads(line)) is None


def test_the_server_refuses_a_duplicate_key_by_line_naming_it():
    report = _validate(f"{GOOD}\n{TWICE}\n{GOOD}\n".encode())
    assert (report.rows, report.error_count) == (2, 1)
    assert str(report.errors[0]) == ('line 2: the key "content" appears twice in one object; JSON readers keep only '
                                     "one of them, so remove the other")


def test_the_client_refuses_a_duplicate_key_by_line_and_by_array_row(tmp_path):
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text(f"{GOOD}\n{TWICE}\n")
    conversion = convert_file(jsonl, detect_container(jsonl), SourceFormat.CHAT, io.BytesIO())
    assert conversion.rows == 1 and conversion.errors == [
        {"line": 2, "reason": 'the key "content" appears twice in one object; JSON readers keep only one of them, '
                              "so remove the other"}]
    array = tmp_path / "rows.json"
    array.write_text(f"[{GOOD},\n {GOOD},\n {TWICE}]")
    conversion = convert_file(array, detect_container(array), SourceFormat.CHAT, io.BytesIO())
    assert conversion.rows == 2 and [e["row"] for e in conversion.errors] == [3]
    assert duplicate_keys_by_row(f"[{GOOD}]".encode(), [json.loads(GOOD)]) == {}


def _gzip(tmp_path):
    path = tmp_path / "rows.jsonl.gz"
    path.write_bytes(gzip.compress(f"{GOOD}\n".encode()))
    return path


def test_a_compressed_or_binary_file_is_refused_as_such_by_the_client(tmp_path):
    with pytest.raises(Invalid) as refused:
        inspect_source(_gzip(tmp_path))
    assert refused.value.message == f"{tmp_path / 'rows.jsonl.gz'} looks like gzip; decompress it first"
    assert "surrogate" not in refused.value.message
    archive = tmp_path / "rows.zip"
    with zipfile.ZipFile(archive, "w") as writer:
        writer.writestr("rows.jsonl", GOOD)
    with pytest.raises(Invalid, match="looks like a zip archive; extract the dataset file from it first"):
        inspect_source(archive, SourceFormat.CHAT)
    binary = tmp_path / "rows.bin"
    binary.write_bytes(bytes(range(256)))
    with pytest.raises(Invalid, match=r"rows.bin is not text \(it holds NUL bytes\)"):
        inspect_source(binary)
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("Caf\u00e9 menu\n".encode("latin-1"))
    with pytest.raises(Invalid, match=r"latin1.txt is not text \(byte 0xe9 at offset 3 is not UTF-8\)"):
        inspect_source(latin1)
    rows = tmp_path / "latin1.jsonl"  # rows in another encoding: refused by line, saying where
    rows.write_bytes(f"{GOOD}\n".encode() + '{"messages": "caf\u00e9"}\n'.encode("latin-1"))
    conversion = convert_file(rows, detect_container(rows), SourceFormat.CHAT, io.BytesIO())
    assert conversion.errors == [{"line": 2, "reason": "not UTF-8 text (byte 0xe9 at column 18); save the file as "
                                                       "UTF-8"}]
    utf16 = tmp_path / "utf16.jsonl"
    utf16.write_bytes(f"{GOOD}\n".encode("utf-16"))
    with pytest.raises(Invalid, match="is UTF-16 text; save it as UTF-8"):
        inspect_source(utf16)


def test_a_compressed_file_is_refused_as_such_by_the_server(tmp_path):
    report = _validate(_gzip(tmp_path).read_bytes())
    assert report.error_count == 1 and str(report.errors[0]) == "line 1: the file looks like gzip; decompress it first"
    later_shard = _validate(b"\x1f\x8b" + GOOD.encode() + b"\n", first_line=11)  # not the file's start: a line
    assert str(later_shard.errors[0]) == "line 11: not UTF-8 text (byte 0x8b at column 2); save the file as UTF-8"


def test_a_line_that_is_not_utf8_says_so_with_where():
    report = _validate(f"{GOOD}\n".encode() + '{"messages": "caf\u00e9"}\n'.encode("latin-1"))
    assert str(report.errors[0]) == "line 2: not UTF-8 text (byte 0xe9 at column 18); save the file as UTF-8"


def test_text_files_are_not_taken_for_binary():
    assert binary_reason(f"\ufeff{GOOD}\n".encode()) is None  # a byte order mark
    assert binary_reason(("é" * 3000).encode()[:4095]) is None  # a character cut at the end of the head
    assert binary_reason(b"[\n" + GOOD.encode()) is None


# --- text printed on a terminal ---------------------------------------------------------------------------------


def test_control_sequences_are_escaped_newlines_and_tabs_kept():
    from optimize.cli.safe_text import escape_controls, safe_markup

    hostile = "name\x1b[2J\x1b]0;pwned\x07\r\x08\x9b31m\u202eevil\x7f\nnext\tcell"
    assert escape_controls(hostile) == "name\\x1b[2J\\x1b]0;pwned\\x07\\r\\b\\x9b31m\\u202eevil\\x7f\nnext\tcell"
    assert safe_markup("[bold]\x1b") == "\\[bold]\\x1b"
    assert escape_controls("plain é 中文") == "plain é 中文"


def test_every_console_and_table_prints_controls_escaped():
    from optimize.cli.render import table
    from optimize.cli.safe_text import SafeConsole

    sink = io.StringIO()
    con = SafeConsole(file=sink, width=120, force_terminal=True, highlight=False, soft_wrap=True)
    con.print("[bold]Project[/] x\x1b[31my\x1b]8;;http://evil\x1b\\")
    grid = table("NAME", "DESCRIPTION")
    grid.add_row("n\x1b[2J", "first\nsecond")
    con.print(grid)
    printed = sink.getvalue()
    assert "x\\x1b[31my\\x1b]8;;http://evil\\x1b\\" in printed and "n\\x1b[2J" in printed
    assert "first" in printed and "second" in printed
    assert "\x1b" not in re.sub("\x1b\\[[0-9;]*m", "", printed)  # what is left is Rich's own styling
