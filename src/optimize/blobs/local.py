"""A content-addressed blob store in a local folder.

Keys are sha256 hex digests only; user names never reach a path. A write goes to a staging file, is hashed
as it streams, fsynced, and renamed into `sha256/ab/cd/<hex>` only if its digest is the one promised, so a
reader never sees a partial or wrong object.
"""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

from optimize.core.digests import is_sha256_hex
from optimize.core.errors import ChecksumMismatch, Invalid, StorageFull
from optimize.core.ids import new_id


class BlobWriter:
    """One staged write. `write` chunks, then `commit(expected_sha256)` or `abort`."""

    def __init__(self, store: LocalBlobStore) -> None:
        self._store = store
        self.staging_path = store.staging / f"{new_id()}.part"
        self._file = self.staging_path.open("wb")
        self._hash = hashlib.sha256()
        self.size = 0

    def write(self, chunk: bytes) -> None:
        self._hash.update(chunk)
        try:
            self._file.write(chunk)
        except OSError as error:
            self.abort()
            raise _storage_error(error) from error
        self.size += len(chunk)

    @property
    def sha256(self) -> str:
        return self._hash.hexdigest()

    def commit(self, expected_sha256: str) -> Path:
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
        except OSError as error:
            self.abort()
            raise _storage_error(error) from error
        if self.sha256 != expected_sha256:
            self.abort()
            raise ChecksumMismatch(
                f"the bytes received hash to sha256:{self.sha256}, not the promised sha256:{expected_sha256}",
                hint="send the shard again",
            )
        target = self._store.path_for(expected_sha256)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(self.staging_path, target)
        _fsync_dir(target.parent)
        return target

    def abort(self) -> None:
        if not self._file.closed:
            self._file.close()
        self.staging_path.unlink(missing_ok=True)


class LocalBlobStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.staging = root / "staging"
        self.staging.mkdir(parents=True, exist_ok=True)

    def clear_staging(self) -> int:
        """Remove partial writes left by a process that stopped mid-write; call only at server start."""
        removed = 0
        for leftover in self.staging.glob("*.part"):
            leftover.unlink(missing_ok=True)
            removed += 1
        return removed

    def path_for(self, sha256: str) -> Path:
        if not is_sha256_hex(sha256):
            raise Invalid(f"{sha256!r} is not a sha256 hex digest")
        return self.root / "sha256" / sha256[:2] / sha256[2:4] / sha256

    def exists(self, sha256: str) -> bool:
        return self.path_for(sha256).is_file()

    def writer(self) -> BlobWriter:
        return BlobWriter(self)

    def location(self, sha256: str) -> str:
        return self.path_for(sha256).as_uri()


def _fsync_dir(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _storage_error(error: OSError) -> Exception:
    if error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return StorageFull(f"the blob store could not write: {os.strerror(error.errno)}", hint="free space and retry")
    return error
