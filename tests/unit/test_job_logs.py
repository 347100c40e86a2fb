"""The kernel reads worker logs back (optimize.jobs.logs): a file per attempt, the newest by default, chunks by byte
offset that end after a whole line and never inside a UTF-8 character, an old single-file log as attempt 1, and a
job or attempt that does not exist refused (404) naming the attempts that have a log."""

from __future__ import annotations

import pytest

from optimize.core.errors import NotFound
from optimize.jobs.logs import LOGS, attempts, log_path, read_chunk, read_log
from tests.conftest import shown

JOB = "0123456789abcdef0123456789abcdef"


def write(log_dir, attempt: int, text: str, kind: str = "run", job: str = JOB) -> None:
    path = log_path(log_dir, kind, job, attempt)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode())


def test_attempts_are_told_apart_and_the_newest_is_read_by_default(tmp_path):
    write(tmp_path, 1, "first attempt\n")
    write(tmp_path, 2, "second attempt\n")
    write(tmp_path, 10, "tenth attempt\n")  # ordered as numbers, not as names
    write(tmp_path, 1, "another job\n", job="f" * 32)
    (tmp_path / "run" / JOB / "notes.txt").write_text("not a log")
    assert list(attempts(tmp_path, "run", JOB)) == [1, 2, 10]
    newest = read_chunk(tmp_path, "run", JOB)
    assert (newest.attempt, newest.attempts, newest.text) == (10, [1, 2, 10], "tenth attempt\n")
    assert read_chunk(tmp_path, "run", JOB, attempt=2).text == "second attempt\n"
    assert read_chunk(tmp_path, "evaluation", JOB).attempts == []  # kinds keep apart


def test_a_log_is_paged_by_offset_in_whole_lines(tmp_path):
    lines = [f"line {i}: {'x' * i}\n" for i in range(40)]
    write(tmp_path, 1, "".join(lines))
    size = len("".join(lines).encode())
    text, offset, chunks = "", 0, 0
    while True:
        chunk = read_chunk(tmp_path, "run", JOB, 1, offset, limit=100)
        assert chunk.offset == offset and chunk.size == size
        assert chunk.text.endswith("\n") and len(chunk.text.encode()) <= 100  # whole lines, within the limit
        text, offset, chunks = text + chunk.text, chunk.next_offset, chunks + 1
        if offset >= size:
            break
    assert text == "".join(lines) and chunks > 10
    # at the end: nothing more, until the worker writes more
    end = read_chunk(tmp_path, "run", JOB, 1, offset)
    assert (end.text, end.next_offset) == ("", size)
    with log_path(tmp_path, "run", JOB, 1).open("a") as handle:
        handle.write("partial line without its end")
    more = read_chunk(tmp_path, "run", JOB, 1, offset)
    assert (more.text, more.next_offset) == ("partial line without its end", size + len("partial line without its end"))
    # an offset past the end reads nothing and stays where it is
    assert read_chunk(tmp_path, "run", JOB, 1, 10_000).text == ""


def test_a_line_longer_than_a_chunk_is_cut_between_characters_never_inside_one(tmp_path):
    text = "é" * 100 + "€" * 50 + "\n"  # 2- and 3-byte characters on one long line
    write(tmp_path, 1, text)
    read, offset = "", 0
    while offset < len(text.encode()):
        chunk = read_chunk(tmp_path, "run", JOB, 1, offset, limit=7)
        assert "\ufffd" not in chunk.text and chunk.next_offset > offset
        read, offset = read + chunk.text, chunk.next_offset
    assert read == text
    tiny = read_chunk(tmp_path, "run", JOB, 1, 0, limit=1)  # a limit below one character: it is taken whole
    assert tiny.text.startswith("é") and "\ufffd" not in tiny.text and tiny.next_offset == len(tiny.text.encode())


def test_a_character_still_being_written_is_held_back_until_the_writer_is_done(tmp_path):
    write(tmp_path, 1, "step 1\n")
    with log_path(tmp_path, "run", JOB, 1).open("ab") as handle:
        handle.write("€".encode()[:2])  # the worker has written two of its three bytes
    chunk = read_chunk(tmp_path, "run", JOB, 1)
    assert (chunk.text, chunk.next_offset, chunk.size) == ("step 1\n", 7, 9)
    # once the job is settled the writer is done: the broken end is read (replaced) rather than held forever
    final = read_chunk(tmp_path, "run", JOB, 1, 7, final=True)
    assert (final.text, final.next_offset) == ("\ufffd", 9)


def test_an_old_single_file_log_reads_as_attempt_1(tmp_path):
    (tmp_path / f"run-{JOB}.log").write_text("written before logs had an attempt\n")
    chunk = read_chunk(tmp_path, "run", JOB)
    assert (chunk.attempt, chunk.attempts, chunk.text) == (1, [1], "written before logs had an attempt\n")
    write(tmp_path, 2, "attempt 2\n")
    assert list(attempts(tmp_path, "run", JOB)) == [1, 2]
    assert read_chunk(tmp_path, "run", JOB, 1).text == "written before logs had an attempt\n"


def test_an_attempt_without_a_log_is_refused_naming_those_that_have_one(tmp_path):
    write(tmp_path, 1, "a\n")
    write(tmp_path, 2, "b\n")
    with pytest.raises(NotFound) as refused:
        read_chunk(tmp_path, "run", JOB, 9)
    assert refused.value.message == f"run {JOB[:12]} has no attempt 9 with a log; its attempts with logs: 1, 2"
    assert refused.value.to_problem()["status"] == 404 and refused.value.to_problem()["attempts"] == [1, 2]
    assert "--attempt 2" in refused.value.hint
    with pytest.raises(NotFound, match="no attempt of it has a log yet"):
        read_chunk(tmp_path, "run", "e" * 32, 1)
    # no attempt asked and none has a log: an empty answer, not a refusal (a queued job)
    empty = read_chunk(tmp_path, "run", "e" * 32)
    assert (empty.attempt, empty.attempts, empty.text, empty.next_offset) == (None, [], "", 0)


def test_read_log_finds_the_job_by_prefix_and_says_whether_it_is_settled(deployment, add_analysis):
    add_analysis("a1" * 16, "running")
    add_analysis("b2" * 16, "done")
    write(deployment.data_dir / LOGS, 1, "measuring\n", kind="analysis", job="a1" * 16)
    answer = shown(read_log(deployment, "analysis", "A1A1A1"))  # a prefix, in any case
    assert answer == {"kind": "analysis", "id": "a1" * 16, "phase": "running", "attempt": 1, "attempts": [1],
                      "text": "measuring\n", "offset": 0, "nextOffset": 10, "size": 10, "settled": False}
    done = read_log(deployment, "analysis", "b2b2")
    assert (done.settled, done.attempt, done.text) == (True, None, "")
    with pytest.raises(NotFound, match="analysis 'c3c3c3' does not exist"):
        read_log(deployment, "analysis", "c3c3c3")
    with pytest.raises(NotFound, match=r"analysis a1a1a1a1a1a1 has no attempt 2 with a log; its attempts with logs: 1"):
        read_log(deployment, "analysis", "a1a1", attempt=2)
