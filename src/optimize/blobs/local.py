"""A content-addressed blob store in a local folder.

Keys are sha256 hex digests only; user names never reach a path. A write goes to a staging file, is hashed
as it streams, fsynced, and renamed into `sha256/ab/cd/<hex>` only if its digest is the one promised, so a
reader never sees a partial or wrong object.

Every read is verified. A held object's bytes are checked against its name before they are used or served
(`verified_path`, `holds`, `stream`); the check is remembered with the file's identity (size, mtime, ctime, inode),
so a file is hashed again only after it changed, and `stream` hashes what it sends as well, holding back the last
chunk until the digest matches. A copy that does not match is quarantined: moved to `quarantine/`, logged, and
from then on not held, so the next upload of the right bytes (a register, a worker's save) stores it again. A
reader that needs the bytes takes them through `held_path` or `open_held`: an object no longer held (quarantined
by an earlier read) is refused there with Gone (410) naming it, never a missing file further on.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from optimize.core.digests import file_identity, file_sha256, is_sha256_hex, verified_chunks
from optimize.core.errors import ChecksumMismatch, Corrupt, Gone, Invalid, NotFound, StorageFull
from optimize.core.ids import new_id

log = logging.getLogger("optimize.blobs")
ASIDE = "collecting"  # the store's folder where the collector's candidates wait for its second reading of references
RESTORE_HINT = ("upload the same content again to restore it: registering the same file again sends what the "
                "registry no longer holds")


@dataclass(frozen=True, slots=True)
class Aside:
    """An object the collector moved out of reach while it reads references again (registry.collection)."""

    sha256: str
    written: float  # when the object was last written before it was moved (a timestamp)
    place: str  # where it waits: a file (this store) or an object key (S3)


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

    def flush(self) -> None:
        """Everything written so far readable at `staging_path` (a file checked whole before it is committed)."""
        try:
            self._file.flush()
        except OSError as error:
            self.abort()
            raise _storage_error(error) from error

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
        self._store.remember(expected_sha256, target)  # hashed as it was written
        return target

    def abort(self) -> None:
        if not self._file.closed:
            self._file.close()
        self.staging_path.unlink(missing_ok=True)


class LocalBlobStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.staging = root / "staging"
        self.quarantined = root / "quarantine"
        self.staging.mkdir(parents=True, exist_ok=True)
        self._verified: dict[str, tuple[int, ...]] = {}  # sha256 -> identity of the file when it last matched

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
        """Whether a file is there under the name, unchecked; `holds` says whether it is the right bytes."""
        return self.path_for(sha256).is_file()

    def holds(self, sha256: str) -> bool:
        """Whether a good copy is held: a corrupt one is quarantined and not held (so it is uploaded again)."""
        try:
            return self.verified_path(sha256).is_file()
        except Corrupt:
            return False

    def verified_path(self, sha256: str) -> Path:
        """The object's path once its bytes are known to match its name (hashed now unless the file is unchanged
        since it last matched). A corrupt copy is quarantined and `Corrupt` raised; an object not held keeps its
        path, for the caller to report as missing in its own words."""
        path = self.path_for(sha256)
        identity = file_identity(path)
        if identity is None or self._verified.get(sha256) == identity:
            return path
        actual = file_sha256(path)
        if actual != sha256 and file_identity(path) != identity:
            return self.verified_path(sha256)  # replaced while it was read (an upload healing it): check it again
        if actual != sha256:
            self.quarantine(sha256, actual)
            raise Corrupt(f"stored object sha256:{sha256} is corrupt (its bytes hash to sha256:{actual}); it was "
                          "quarantined", hint=RESTORE_HINT)
        if file_identity(path) == identity:  # unchanged while it was read
            self._verified[sha256] = identity
        return path

    def held_path(self, sha256: str, what: str | None = None, hint: str = RESTORE_HINT) -> Path:
        """`verified_path` for a reader that needs the bytes: an object not held (quarantined by an earlier read,
        or lost) is refused with Gone (410), `what` (default `stored object sha256:HEX`) is not held by this
        server, with `hint`; a corrupt copy is quarantined and refused (Corrupt, 410) as `verified_path` does."""
        path = self.verified_path(sha256)
        if not path.is_file():
            raise _gone(sha256, what, hint)
        return path

    def open_held(self, sha256: str, what: str | None = None, hint: str = RESTORE_HINT) -> BinaryIO:
        """`held_path`, opened for reading (an object moved aside between the check and the open is refused alike)."""
        try:
            return self.held_path(sha256, what, hint).open("rb")
        except FileNotFoundError:
            raise _gone(sha256, what, hint) from None

    def stream(self, sha256: str) -> tuple[int, Iterator[bytes]]:
        """(size, chunks) of a held object, checked before the first byte and hashed again as it is sent: a copy
        that changed since it was checked ends the stream before its last chunk and is quarantined."""
        path = self.verified_path(sha256)
        identity = file_identity(path)
        if identity is None:
            raise NotFound(f"blob sha256:{sha256} is not held")
        return identity[0], verified_chunks(path, sha256, lambda actual: self.quarantine(sha256, actual))

    def remember(self, sha256: str, path: Path) -> None:
        """Record that the file under the name now holds bytes that hash to it (they were hashed as written)."""
        identity = file_identity(path)
        if identity is not None:
            self._verified[sha256] = identity

    def quarantine(self, sha256: str, actual: str) -> Path | None:
        """Move a copy whose bytes hash to `actual` out of the store (into `quarantine/`, kept for inspection):
        from now on the object is not held. Returns where it went (None when another reader moved it first)."""
        self._verified.pop(sha256, None)
        self.quarantined.mkdir(parents=True, exist_ok=True)
        target = self.quarantined / f"{sha256}.{new_id()}"
        try:
            os.replace(self.path_for(sha256), target)
        except FileNotFoundError:
            return None
        log.warning("blob sha256:%s is corrupt (its bytes hash to sha256:%s); quarantined as %s", sha256, actual,
                    target)
        return target

    def remove(self, sha256: str) -> bool:
        """Delete a held object (the collector, once nothing names it); False when it was not there."""
        self._verified.pop(sha256, None)
        try:
            self.path_for(sha256).unlink()
        except FileNotFoundError:
            return False
        return True

    def writer(self) -> BlobWriter:
        return BlobWriter(self)

    def location(self, sha256: str) -> str:
        return self.path_for(sha256).as_uri()

    def download_url(self, sha256: str) -> str | None:
        """Where a worker may read the object itself; None: through the server (this store is its own disk)."""
        return None

    direct_writes = False  # workers write their blobs through the server

    def upload_target(self, sha256: str, size: int) -> dict[str, Any] | None:
        """Where a worker may write the object itself (`url`, `headers`); None: through the server."""
        return None

    def accept_upload(self, sha256: str) -> int:
        """The size of an object a worker wrote itself, once its bytes are known to be the name's."""
        raise NotFound(f"blob sha256:{sha256} is written through the server on this deployment")

    def describe(self) -> str:
        return str(self.root)

    # The collector's moves (registry.collection): list, set aside, put back or discard.

    def listed(self) -> list[tuple[str, int, float]]:
        """(sha256, bytes, mtime) of every object in the store."""
        held = []
        for path in (self.root / "sha256").glob("*/*/*"):
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            if is_sha256_hex(path.name):
                held.append((path.name, stat.st_size, stat.st_mtime))
        return held

    def set_aside(self, sha256: str, cutoff: float) -> Aside | None:
        """Rename the object out of the store unless it was written again since it was listed (an atomic rename:
        what the collector then judges is exactly the file it would remove); None when it was not moved."""
        path, target = self.path_for(sha256), self.root / ASIDE / f"{sha256}.{new_id()}"
        target.parent.mkdir(exist_ok=True)
        try:
            written = path.stat().st_mtime
            if written >= cutoff:
                return None
            os.rename(path, target)
        except FileNotFoundError:
            return None
        self._verified.pop(sha256, None)
        return Aside(sha256, written, str(target))

    def put_back(self, aside: Aside) -> None:
        """Return a moved object under its name; a copy written there meanwhile holds the same bytes and stays."""
        path = self.path_for(aside.sha256)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(aside.place, path)
        except FileExistsError:
            pass
        Path(aside.place).unlink()

    def discard(self, aside: Aside) -> None:
        Path(aside.place).unlink()

    def left_aside(self) -> list[Aside]:
        """What a collector's pass that stopped midway had moved aside (it goes back first, then is judged)."""
        left = []
        for path in (self.root / ASIDE).glob("*.*"):
            sha256 = path.name.split(".")[0]
            if is_sha256_hex(sha256):
                left.append(Aside(sha256, path.stat().st_mtime, str(path)))
        return left


def _gone(sha256: str, what: str | None, hint: str) -> Gone:
    return Gone(f"{what or f'stored object sha256:{sha256}'} is not held by this server", hint=hint)


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
