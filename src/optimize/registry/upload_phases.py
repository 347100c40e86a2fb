"""The upload session lifecycle as data (moved by `optimize.jobs.lifecycle.transition`): an upload is open until
its shards are committed as a dataset version, or until a shard's rows are refused, which closes it (its other
shards are still checked, so every bad line is named, but it cannot be committed). The same register command opens
a refused session again. It has no worker; an expired open session starts over on the same command, so expiry is a
time, not a phase; the collector (registry/collection.py) removes expired and refused sessions."""

from __future__ import annotations

from enum import StrEnum

from optimize.jobs.lifecycle import Lifecycle
from optimize.store.tables import UploadSession


class UploadPhase(StrEnum):
    OPEN = "open"  # shards are sent; the same register command reaches it again
    COMMITTED = "committed"  # its shards are a dataset version
    REFUSED = "refused"  # a shard's rows were refused: closed until the same command opens it again


UPLOAD = Lifecycle(
    kind="upload", phases=UploadPhase, table=UploadSession, terminal=frozenset({UploadPhase.COMMITTED}),
    transitions={UploadPhase.OPEN: frozenset({UploadPhase.COMMITTED, UploadPhase.REFUSED}),
                 UploadPhase.REFUSED: frozenset({UploadPhase.OPEN}), UploadPhase.COMMITTED: frozenset()})
