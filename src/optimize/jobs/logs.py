"""Worker logs: what a job's worker printed, one file per attempt, read back in chunks by byte offset.

The executor writes each attempt's stdout and stderr to `DATA_DIR/logs/{kind}/{job_id}/attempt-{N}.log` (a worker
forked warm writes to the same file a started one would). A log written before attempts had files of their own,
`DATA_DIR/logs/{kind}-{job_id}.log` (every attempt appended to it), reads as attempt 1.

`read_log` answers `GET …/{id}/logs` for every kind: a chunk of at most CHUNK_BYTES from a byte offset, the offset
to ask for next, the attempts that have a log and whether the job is settled: in a settled phase with its worker
gone, read before the log, so a settled job's chunk holds everything its worker wrote. A chunk ends after a whole
line where it can, and never inside a UTF-8 character, so following a log by `nextOffset` neither splits nor
repeats text.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optimize.core.access import visible_item
from optimize.core.errors import NotFound
from optimize.jobs import registry
from optimize.schemas.logs import JobLog
from optimize.store.db import find_by_id_prefix

CHUNK_BYTES = 1 << 20  # the most a chunk holds; a longer log is paged with `offset`
LOGS = "logs"  # the folder of the data dir that holds them
_ATTEMPT_FILE = re.compile(r"attempt-([1-9][0-9]*)\.log")


def log_path(log_dir: Path, kind: str, job_id: str, attempt: int) -> Path:
    """Where the worker of the job's attempt writes (its folder is made by whoever writes first)."""
    return log_dir / kind / job_id / f"attempt-{attempt}.log"


def attempts(log_dir: Path, kind: str, job_id: str) -> dict[int, Path]:
    """The job's attempts that have a log, oldest first, with their files."""
    found: dict[int, Path] = {}
    folder = log_dir / kind / job_id
    if folder.is_dir():
        for path in folder.iterdir():
            match = _ATTEMPT_FILE.fullmatch(path.name)
            if match:
                found[int(match.group(1))] = path
    legacy = log_dir / f"{kind}-{job_id}.log"
    if 1 not in found and legacy.is_file():
        found[1] = legacy
    return dict(sorted(found.items()))


@dataclass(frozen=True)
class Chunk:
    attempt: int | None  # None: no attempt has a log yet
    attempts: list[int]
    text: str
    offset: int
    next_offset: int
    size: int  # the attempt's log in bytes when it was read


def read_chunk(log_dir: Path, kind: str, job_id: str, attempt: int | None = None, offset: int = 0,
               limit: int = CHUNK_BYTES, final: bool = False, noun: str | None = None) -> Chunk:
    """Up to `limit` bytes of an attempt's log (default: the newest attempt) from byte `offset`. An attempt without a
    log is refused (NotFound) naming the attempts that have one. `final`: the writer is done, so bytes at the end
    that begin a character but do not complete it are decoded (replaced) rather than held back."""
    if offset < 0:
        raise ValueError("a log offset is 0 or more")
    found = attempts(log_dir, kind, job_id)
    numbers = list(found)
    if attempt is None:
        if not found:
            return Chunk(None, [], "", offset, offset, 0)
        attempt = numbers[-1]
    if attempt not in found:
        what = f"{noun or kind} {job_id[:12]}"
        if found:
            listed = ", ".join(map(str, numbers))
            raise NotFound(f"{what} has no attempt {attempt} with a log; its attempts with logs: {listed}",
                           hint=f"ask for one of them (--attempt {numbers[-1]}), or leave the attempt out for the "
                                "newest", attempts=numbers)
        raise NotFound(f"{what} has no attempt {attempt} with a log; no attempt of it has a log yet",
                       hint="its worker writes one once it starts; leave the attempt out to read the newest",
                       attempts=numbers)
    path = found[attempt]
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(min(offset, size))
            data = handle.read(max(1, limit)) if offset < size else b""
    except FileNotFoundError:  # removed between the listing and the read
        data, size = b"", 0
    at_end = offset + len(data) >= size
    if not at_end and b"\n" in data:
        data = data[:data.rindex(b"\n") + 1]  # whole lines where the chunk can hold one
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    text = decoder.decode(data, final=final and at_end)
    held = len(decoder.getstate()[0])  # the start of a character whose rest is not read (or not written) yet
    if not text and held and not at_end:  # a limit below one character: take the character whole
        return read_chunk(log_dir, kind, job_id, attempt, offset, limit + 4, final, noun)
    return Chunk(attempt, numbers, text, offset, offset + len(data) - held, size)


def read_log(deployment: Any, kind: str, job_id: str, attempt: int | None = None, offset: int = 0,
             limit: int = CHUNK_BYTES) -> JobLog:
    """`GET …/{id}/logs` of any kind: the job named by its id or an unambiguous prefix (an unknown one is refused),
    a chunk of its attempt's log, and whether it is settled."""
    declared = registry.kind(kind)
    lifecycle = declared.lifecycle
    with deployment.store.transaction() as session:
        row = find_by_id_prefix(session, lifecycle.table, job_id, kind,
                                f"give the id, or a prefix of it, of an existing {kind}", visible_item(lifecycle.table))
        full_id, phase = row.id, lifecycle.phase_of(row)
    # read before the log, so a settled job's chunk holds all it wrote: its phase, and that its worker is gone (a
    # worker goes on for a moment after its job settled, until it exits or the kernel has stopped it)
    settled = phase in lifecycle.settled
    executor = getattr(deployment, "executor", None)
    if settled and executor is not None:
        settled = not executor.alive(kind, full_id)
    chunk = read_chunk(Path(deployment.data_dir) / LOGS, kind, full_id, attempt, offset, limit, final=settled)
    return JobLog(kind=kind, id=full_id, phase=phase.value, attempt=chunk.attempt, attempts=chunk.attempts,
                  text=chunk.text, offset=chunk.offset, next_offset=chunk.next_offset, size=chunk.size, settled=settled)
