"""The upload session lifecycle as data (moved by `optimize.jobs.lifecycle.transition`): an upload is open until
its shards are committed as a dataset version. It has no worker; an expired open session starts over on the same
command, so expiry is a time, not a phase."""

from __future__ import annotations

from enum import StrEnum

from optimize.jobs.lifecycle import Lifecycle
from optimize.store.tables import UploadSession


class UploadPhase(StrEnum):
    OPEN = "open"  # shards are sent; the same register command reaches it again
    COMMITTED = "committed"  # its shards are a dataset version


UPLOAD = Lifecycle(
    kind="upload", phases=UploadPhase, table=UploadSession, terminal=frozenset({UploadPhase.COMMITTED}),
    transitions={UploadPhase.OPEN: frozenset({UploadPhase.COMMITTED}), UploadPhase.COMMITTED: frozenset()})
