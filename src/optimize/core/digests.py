"""Content digests: sha256 of a file (read in chunks), a file's identity (what any change of its bytes changes), a
file's bytes streamed only as far as they match their digest, and a dataset version's digest derived from its
ordered objects.

The version digest depends only on the format and the ordered (path, sha256, size) listing, so the same file
cut the same way is the same version on every deployment.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from stat import S_ISREG

from optimize.core.errors import Corrupt

_HEX = re.compile(r"[0-9a-f]{64}")
_CHUNK = 1 << 20


def file_sha256(path: Path) -> str:
    """The sha256 hex of a file's bytes, read a chunk at a time (model weights do not fit in memory twice)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def file_identity(path: Path) -> tuple[int, int, int, int, int] | None:
    """What changes whenever a file's bytes do: size, mtime_ns, ctime_ns (which no user call can set back, so a
    write followed by `touch -d` still shows), inode and device; None when no regular file is there. A verified
    marker that records it is invalidated by any write, replacement or truncation."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    if not S_ISREG(stat.st_mode):
        return None
    return stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, stat.st_dev


def verified_chunks(path: Path, sha256: str, on_corrupt: Callable[[str], None] | None = None,
                    chunk: int = _CHUNK) -> Iterator[bytes]:
    """The file's bytes in chunks, the last one held back until the whole file hashed to `sha256`: a reader that
    checks the length it was promised never gets all the bytes of a file that does not match. On a mismatch
    `on_corrupt(actual_sha256)` runs and `Corrupt` is raised instead of the last chunk."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        held = handle.read(chunk)
        while held:
            digest.update(held)
            following = handle.read(chunk)
            if not following:
                break
            yield held
            held = following
        actual = digest.hexdigest()
        if actual != sha256:
            if on_corrupt is not None:
                on_corrupt(actual)
            raise Corrupt(f"stored object sha256:{sha256} is corrupt: its bytes hash to sha256:{actual}")
        if held:
            yield held


def is_sha256_hex(text: str) -> bool:
    return _HEX.fullmatch(text) is not None


def version_digest(format_name: str, objects: Iterable[tuple[str, str, int]]) -> str:
    """`sha256:` over a canonical listing of the version's objects, in order."""
    listing = [f"optimize.dataset-version.v1\nformat {format_name}\n"]
    listing.extend(f"{path} {sha} {size}\n" for path, sha, size in objects)
    return "sha256:" + hashlib.sha256("".join(listing).encode()).hexdigest()
