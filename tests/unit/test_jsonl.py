"""Streaming validation: any chunking gives the same report; long lines stay bounded; lines are numbered."""

from __future__ import annotations

import json

from optimize.chat.jsonl import MAX_REPORTED_ERRORS, JsonlValidator
from optimize.chat.rows import RowKind

GOOD = json.dumps({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})


def run(data: bytes, chunk: int, **kwargs):
    validator = JsonlValidator(RowKind.CHAT, **kwargs)
    for start in range(0, len(data), chunk):
        validator.feed(data[start:start + chunk])
    return validator.finish()


def test_report_is_the_same_for_every_chunking():
    lines = [GOOD, "{bad json", GOOD, '{"messages": []}', GOOD]
    data = ("\n".join(lines) + "\n").encode()
    reports = [run(data, size) for size in (1, 3, 7, 64, len(data))]
    for report in reports:
        assert (report.rows, report.lines, report.error_count) == (3, 5, 2)
        assert [e.line for e in report.errors] == [2, 4]


def test_last_line_without_newline_counts():
    report = run((GOOD + "\n" + GOOD).encode(), 10)
    assert (report.rows, report.lines) == (2, 2)


def test_lines_are_numbered_from_first_line():
    report = run(b"{bad\n", 2, first_line=1001)
    assert report.errors[0].line == 1001


def test_empty_line_is_refused():
    report = run((GOOD + "\n\n" + GOOD + "\n").encode(), 5)
    assert report.errors[0].line == 2 and "the line is empty" in report.errors[0].reason


def test_long_line_refused_without_buffering_it():
    long = b'{"messages": "' + b"x" * 10_000 + b'"}'
    validator = JsonlValidator(RowKind.CHAT, max_line_bytes=1000)
    for start in range(0, len(long), 100):
        validator.feed(long[start:start + 100])
        assert len(validator._partial) <= 1000
    validator.feed(b"\n" + GOOD.encode() + b"\n")
    report = validator.finish()
    assert report.errors[0].line == 1 and "longer than the limit of 1000 bytes" in report.errors[0].reason
    assert report.rows == 1


def test_first_twenty_errors_kept_and_all_counted():
    data = b"{bad\n" * 50
    report = run(data, 4096)
    assert report.error_count == 50
    assert len(report.errors) == MAX_REPORTED_ERRORS


def test_a_byte_order_mark_opening_the_file_is_accepted_and_nowhere_else():
    data = b"\xef\xbb\xbf" + (GOOD + "\n").encode()
    for size in (1, 2, 5, len(data)):
        report = run(data, size)
        assert (report.rows, report.error_count) == (1, 0)
    later = run(data, 4, first_line=7)  # a shard after the first: not the start of the file
    assert later.error_count == 1 and later.errors[0].line == 7 and "not valid JSON" in later.errors[0].reason
    second_line = run((GOOD + "\n").encode() + data, 8)
    assert second_line.error_count == 1 and second_line.errors[0].line == 2
