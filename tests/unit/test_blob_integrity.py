"""Stored bytes are verified on every read: the blob store checks an object against its name before it is used or
served (hashing again only after the file changed), quarantines a copy that does not match and counts it as not
held, so the next write of the right bytes heals it; a streamed object never delivers its last chunk unless the
whole matched. The worker cache keeps a verified marker that any change of the file invalidates."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from optimize.blobs.local import LocalBlobStore
from optimize.core.digests import file_identity, verified_chunks
from optimize.core.errors import Corrupt, NotFound


def _put(store: LocalBlobStore, data: bytes) -> str:
    sha = hashlib.sha256(data).hexdigest()
    writer = store.writer()
    writer.write(data)
    writer.commit(sha)
    return sha


def _flip(path, offset: int = 3, keep_times: bool = True) -> None:
    """Change one byte in place; put the modification time back, as a careless copy or a bad disk would leave it."""
    stat = path.stat()
    with path.open("r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0x01]))
    if keep_times:
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_a_flipped_byte_is_detected_quarantined_and_healed_by_writing_the_bytes_again(tmp_path, caplog):
    store = LocalBlobStore(tmp_path)
    data = b'{"messages": []}\n' * 100
    sha = _put(store, data)
    assert store.holds(sha) and store.verified_path(sha).read_bytes() == data
    _flip(store.path_for(sha))  # the same size and mtime: only ctime tells

    with pytest.raises(Corrupt) as refused:
        store.verified_path(sha)
    assert refused.value.status == 410 and refused.value.code == "corrupt"
    assert f"stored object sha256:{sha} is corrupt" in refused.value.message and "quarantined" in refused.value.message
    assert not store.exists(sha) and not store.holds(sha)  # not held any more: the next upload sends it
    [moved] = list(store.quarantined.iterdir())
    assert moved.name.startswith(sha) and moved.read_bytes() != data  # kept aside for inspection
    assert f"blob sha256:{sha} is corrupt" in caplog.text

    assert _put(store, data) == sha  # the right bytes again: held, and served
    assert store.holds(sha)
    size, chunks = store.stream(sha)
    assert size == len(data) and b"".join(chunks) == data


def test_an_unchanged_file_is_not_hashed_again(tmp_path, monkeypatch):
    store = LocalBlobStore(tmp_path)
    sha = _put(store, b"x" * 4096)
    hashed = []
    monkeypatch.setattr("optimize.blobs.local.file_sha256", lambda path: hashed.append(path) or sha)
    for _ in range(3):
        assert store.holds(sha)
    assert hashed == []  # the write hashed it; the marker stands while the file is unchanged
    os.utime(store.path_for(sha))  # any change of the file's identity: checked again, once
    assert store.holds(sha) and store.holds(sha)
    assert len(hashed) == 1


def test_a_stream_stops_before_its_last_chunk_when_the_bytes_changed_after_the_check(tmp_path):
    store = LocalBlobStore(tmp_path)
    data = bytes(range(256)) * 40
    sha = _put(store, data)
    path = store.path_for(sha)
    _flip(path, offset=len(data) - 5)
    store._verified[sha] = file_identity(path)  # a change no metadata shows (bit rot): the marker still stands
    size, chunks = store.stream(sha)
    received = []
    with pytest.raises(Corrupt):
        for chunk in chunks:
            received.append(chunk)
    assert sum(map(len, received)) < size  # the reader never has all the bytes it was promised
    assert not store.holds(sha) and len(list(store.quarantined.iterdir())) == 1


def test_verified_chunks_hold_back_the_last_chunk(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"abcdefghij")
    good = hashlib.sha256(b"abcdefghij").hexdigest()
    assert list(verified_chunks(path, good, chunk=4)) == [b"abcd", b"efgh", b"ij"]
    seen = []
    chunks = verified_chunks(path, "0" * 64, on_corrupt=seen.append, chunk=4)
    assert next(chunks) == b"abcd" and next(chunks) == b"efgh"
    with pytest.raises(Corrupt):
        next(chunks)
    assert seen == [good]
    with pytest.raises(Corrupt):  # a file of one chunk yields nothing when it does not match
        list(verified_chunks(path, "0" * 64))


def test_an_object_not_held_is_not_found(tmp_path):
    store = LocalBlobStore(tmp_path)
    assert not store.holds("a" * 64)
    assert store.verified_path("a" * 64) == store.path_for("a" * 64)  # the caller reports it missing
    with pytest.raises(NotFound):
        store.stream("a" * 64)


def test_the_worker_cache_uses_a_copy_only_while_its_marker_matches(tmp_path):
    from optimize.worker.channel import _cached_copy_matches, _mark_verified, _marker

    data = b"row\n" * 1000
    sha = hashlib.sha256(data).hexdigest()
    target = tmp_path / sha
    target.write_bytes(data)
    _mark_verified(target)
    assert _marker(target).is_file() and _cached_copy_matches(target, sha)
    _flip(target)  # mtime put back: the marker's ctime no longer matches, so the file is hashed and refused
    assert not _cached_copy_matches(target, sha)
    _flip(target)  # the byte back as it was: hashed again, matches, marked again
    assert _cached_copy_matches(target, sha)
    assert json.loads(_marker(target).read_text()) == list(file_identity(target))
