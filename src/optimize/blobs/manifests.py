"""Manifests: blobs that list other blobs (a save's or a model version's files, as JSON `files: [{sha256, …}]`).

The blob scope of a worker (jobs.kinds) and the collector's reference walk (registry.blob_references) both read
them here. A manifest's digest names its bytes, so what it lists never changes: the answer is remembered per
process (bounded), except for a manifest that cannot be read, which may be uploaded again later.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any

from optimize.core.digests import is_sha256_hex
from optimize.core.errors import PlatformError

_KEPT = 512
_listed: OrderedDict[str, frozenset[str]] = OrderedDict()
_lock = threading.Lock()


def listed_files(blobs: Any, sha256: str) -> frozenset[str] | None:
    """The digests the manifest `sha256` lists; None when it cannot be read as one (not held, corrupt, another
    shape)."""
    with _lock:
        if sha256 in _listed:
            _listed.move_to_end(sha256)
            return _listed[sha256]
    try:
        manifest = json.loads(blobs.verified_path(sha256).read_bytes())
        files = frozenset(str(item["sha256"]) for item in manifest["files"])
    except (OSError, ValueError, KeyError, TypeError, PlatformError):
        return None
    if not all(is_sha256_hex(f) for f in files):
        return None
    with _lock:
        _listed[sha256] = files
        while len(_listed) > _KEPT:
            _listed.popitem(last=False)
    return files
