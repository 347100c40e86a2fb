"""Registering a scoring bundle (`akka registry bundles register`): a directory packaged deterministically, or a ZIP
file's bytes exactly as they are, sent only when the registry does not hold them already (its calls are api.py's).
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from optimize.client.api import OptimizeApi
from optimize.client.http import ApiError, OptimizeClient
from optimize.core.bundle_zip import LIMITS, write_bundle
from optimize.core.errors import Invalid, TooLarge
from optimize.core.refs import Reference

_CHUNK = 1024 * 1024


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            yield chunk


def register_bundle(client: OptimizeApi | OptimizeClient, reference: Reference, path: Path, *,
                    alias: str | None = None) -> dict[str, Any]:
    """Register `path` (a bundle's directory, or a ZIP file) as a version of `reference` (NS/NAME). A directory is
    packaged first (core.bundle_zip: the same directory, the same bytes); a file is sent as it is. The answer is the
    version, with `upload`: the archive's size, whether it was packaged, and whether its bytes were sent."""
    api = OptimizeApi.over(client)
    if path.is_dir():
        with tempfile.TemporaryDirectory(prefix="optimize-bundle-") as folder:
            archive = Path(folder) / "bundle.zip"
            with archive.open("wb") as target:
                write_bundle(path, target)
            return _register(api, reference, archive, alias, packaged=True)
    if not path.is_file():
        raise Invalid(f"{path} is neither a directory nor a file",
                      hint="name the bundle's directory (it is packaged) or a ZIP file of it")
    return _register(api, reference, path, alias, packaged=False)


def _register(api: OptimizeApi, reference: Reference, archive: Path, alias: str | None,
              packaged: bool) -> dict[str, Any]:
    size = archive.stat().st_size
    if size > LIMITS.max_archive_bytes:  # refused here before the bytes are hashed or sent, as the server would
        raise TooLarge(f"the archive holds {size:,} bytes; a bundle's archive holds at most "
                       f"{LIMITS.max_archive_bytes:,}", hint="leave out what scoring does not read")
    sha256 = _sha256(archive)
    sent = False
    for attempt in range(2):
        if not api.bundles.archive(reference, sha256)["held"]:
            api.bundles.send_archive(reference, sha256, _chunks(archive), size)
            sent = True
        try:
            version = api.bundles.register(reference, digest=f"sha256:{sha256}", alias=alias)
            break
        except ApiError as error:
            # the archive sent was collected before the registration named it (it waited past the grace): once more
            if error.code != "conflict" or f"the archive sha256:{sha256}" not in error.message or attempt:
                raise
    version["upload"] = {"bytes": size, "packaged": packaged, "sent": sent, "alreadyHeld": not sent}
    return version


__all__ = ["register_bundle"]
