"""How a dataset file is cut into shards: greedily, on line boundaries, each shard at most `shard_size` bytes.

The cut depends only on the file's bytes and the shard size, so the same file registers as the same version
everywhere. A file at most the default shard size, sent without `--shard-size`, is one `examples.jsonl`;
otherwise its objects are `examples-00000.jsonl` onwards. A UTF-8 byte order mark at the start of the file (some
editors write one) is not part of the rows: the shards start after it, so the file registers as the same version as
its twin without the mark.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from optimize.core.errors import Invalid
from optimize.core.limits import DatasetLimits
from optimize.core.sizes import format_size

SINGLE_OBJECT = "examples.jsonl"
UTF8_BOM = b"\xef\xbb\xbf"
_READ = 4 * 1024 * 1024


def shard_path(index: int) -> str:
    return f"examples-{index:05d}.jsonl"


@dataclass(frozen=True, slots=True)
class Shard:
    index: int
    path: str
    offset: int
    size: int
    sha256: str
    lines: int
    first_line: int

    def to_json(self) -> dict[str, object]:
        return {"index": self.index, "path": self.path, "sha256": self.sha256, "bytes": self.size, "lines": self.lines}


def leading_bom(path: Path) -> int:
    """The length of the UTF-8 byte order mark the file starts with: 3, or 0 without one."""
    with path.open("rb") as handle:
        return len(UTF8_BOM) if handle.read(len(UTF8_BOM)) == UTF8_BOM else 0


def _line_ends(path: Path, shard_size: int, start: int, total: int) -> list[int]:
    """Offsets where shards end: just after the last newline within each limit (end of file for the last)."""
    ends: list[int] = []
    with path.open("rb") as handle:
        while total - start > shard_size:
            cut = _last_newline_before(handle, start, start + shard_size)
            if cut < 0:
                line_end = _find_newline(handle, start + shard_size)
                raise Invalid(
                    f"a line starting at byte {start} is longer than the shard size {format_size(shard_size)}",
                    hint=f"pass --shard-size of at least {format_size(_round_up_mib(line_end - start))}",
                )
            start = cut + 1
            ends.append(start)
    ends.append(total)
    return ends


def _last_newline_before(handle, floor: int, limit: int) -> int:
    """The offset of the last newline in [floor, limit), reading backwards in bounded chunks; -1 if none."""
    high = limit
    while high > floor:
        low = max(floor, high - _READ)
        handle.seek(low)
        found = handle.read(high - low).rfind(b"\n")
        if found >= 0:
            return low + found
        high = low
    return -1


def _find_newline(handle, offset: int) -> int:
    handle.seek(offset)
    position = offset
    while chunk := handle.read(_READ):
        found = chunk.find(b"\n")
        if found >= 0:
            return position + found + 1
        position += len(chunk)
    return position


def _round_up_mib(size: int) -> int:
    mib = 1024 * 1024
    return max(mib, -(-size // mib) * mib)


def check_fits(total: int, shard_size: int | None, limits: DatasetLimits) -> int:
    """Return the shard size to cut at, or refuse a file the limits cannot hold, naming a size that fits."""
    if total == 0:
        raise Invalid("the file is empty", hint="a dataset version holds at least one example")
    size = shard_size or limits.max_shard_bytes
    capacity = limits.max_shards * limits.max_shard_bytes
    if total > capacity:
        raise Invalid(
            f"the file is {total} bytes, more than the registry holds in one version "
            f"({limits.max_shards} shards of {format_size(limits.max_shard_bytes)})",
            hint="split the examples into several datasets",
        )
    needed = _round_up_mib(-(-total // limits.max_shards))
    fitting = min(max(needed, min(size, limits.max_shard_bytes)), limits.max_shard_bytes)
    if size > limits.max_shard_bytes:
        raise Invalid(
            f"--shard-size {format_size(size)} is larger than the registry's shard limit "
            f"{format_size(limits.max_shard_bytes)}",
            hint=f"pass --shard-size {format_size(fitting)}",
        )
    if -(-total // size) > limits.max_shards:
        raise Invalid(
            f"cutting {total} bytes at {format_size(size)} makes more than {limits.max_shards} shards",
            hint=f"pass --shard-size {format_size(fitting)}",
        )
    return size


def plan_shards(
    path: Path,
    shard_size: int | None,
    limits: DatasetLimits,
    on_progress: Callable[[int], None] | None = None,
) -> list[Shard]:
    """Cut `path` (after a leading byte order mark) and hash each shard, reading the file once more for digests
    and line counts."""
    total = path.stat().st_size
    skipped = leading_bom(path)
    size = check_fits(total - skipped, shard_size, limits)
    ends = _line_ends(path, size, skipped, total)
    if len(ends) > limits.max_shards:
        raise Invalid(
            f"cutting the file at {format_size(size)} on line boundaries makes {len(ends)} shards, "
            f"more than the limit of {limits.max_shards}",
            hint=f"pass a larger --shard-size (at most {format_size(limits.max_shard_bytes)})",
        )
    single = shard_size is None and len(ends) == 1
    shards: list[Shard] = []
    start = skipped
    first_line = 1
    with path.open("rb") as handle:
        handle.seek(start)
        for index, end in enumerate(ends):
            digest = hashlib.sha256()
            newlines = 0
            remaining = end - start
            last = b""
            while remaining:
                chunk = handle.read(min(_READ, remaining))
                digest.update(chunk)
                newlines += chunk.count(b"\n")
                remaining -= len(chunk)
                last = chunk
                if on_progress:
                    on_progress(len(chunk))
            lines = newlines + (0 if last.endswith(b"\n") else 1)
            shards.append(
                Shard(index, SINGLE_OBJECT if single else shard_path(index), start, end - start,
                      digest.hexdigest(), lines, first_line)
            )
            first_line += lines
            start = end
    return shards
