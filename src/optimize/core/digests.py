"""Content digests: sha256 of bytes, and a dataset version's digest derived from its ordered objects.

The version digest depends only on the format and the ordered (path, sha256, size) listing, so the same file
cut the same way is the same version on every deployment.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

_HEX = re.compile(r"[0-9a-f]{64}")


def is_sha256_hex(text: str) -> bool:
    return _HEX.fullmatch(text) is not None


def version_digest(format_name: str, objects: Iterable[tuple[str, str, int]]) -> str:
    """`sha256:` over a canonical listing of the version's objects, in order."""
    listing = [f"optimize.dataset-version.v1\nformat {format_name}\n"]
    listing.extend(f"{path} {sha} {size}\n" for path, sha, size in objects)
    return "sha256:" + hashlib.sha256("".join(listing).encode()).hexdigest()
