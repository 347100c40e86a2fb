"""Content digests: sha256 of a file (read in chunks), and a dataset version's digest derived from its ordered
objects.

The version digest depends only on the format and the ordered (path, sha256, size) listing, so the same file
cut the same way is the same version on every deployment.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from pathlib import Path

_HEX = re.compile(r"[0-9a-f]{64}")
_CHUNK = 1 << 20


def file_sha256(path: Path) -> str:
    """The sha256 hex of a file's bytes, read a chunk at a time (model weights do not fit in memory twice)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def is_sha256_hex(text: str) -> bool:
    return _HEX.fullmatch(text) is not None


def version_digest(format_name: str, objects: Iterable[tuple[str, str, int]]) -> str:
    """`sha256:` over a canonical listing of the version's objects, in order."""
    listing = [f"optimize.dataset-version.v1\nformat {format_name}\n"]
    listing.extend(f"{path} {sha} {size}\n" for path, sha, size in objects)
    return "sha256:" + hashlib.sha256("".join(listing).encode()).hexdigest()
