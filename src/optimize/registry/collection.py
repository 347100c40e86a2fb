"""The collector: removes what nothing will use again, and reports what it freed.

- Upload sessions: open ones past their expiry, committed ones past it (their version stays), refused ones after
  REFUSED_GRACE (time for the client to hear every bad line).
- Dataset shards that no version holds and no live session names, received more than the upload expiry ago
  (a registration may still be on its way to commit them before that): their rows and their blobs.
Run by the server every OPTIMIZE_GC_SECONDS (default an hour) and by `akka server gc [--dry-run]`. Blobs of saves,
models and analyses are not collected here (their references live inside manifests; a later collector).
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta
from typing import Any

from sqlalchemy import delete, exists, select

from optimize.core.clock import as_utc, utcnow
from optimize.registry.upload_phases import UploadPhase
from optimize.store.tables import DatasetObject, Shard, UploadSession

REFUSED_GRACE = timedelta(minutes=10)
log = logging.getLogger("optimize.collector")


def collect(registry, dry_run: bool = False) -> dict[str, Any]:
    now = utcnow()
    received_before = now - timedelta(seconds=registry.limits.upload_expiry_seconds)
    with registry.store.transaction() as session:
        uploads = list(session.scalars(select(UploadSession)))
        gone = [u for u in uploads if _done_with(u, now)]
        named = {item["sha256"] for u in uploads if u not in gone and u.phase != UploadPhase.COMMITTED
                 for item in u.manifest}
        orphans = [shard for shard in session.scalars(
            select(Shard).where(~exists().where(DatasetObject.sha256 == Shard.sha256)))
            if shard.sha256 not in named and as_utc(shard.created_at) <= received_before]
        report = {"dryRun": dry_run, "uploadSessions": len(gone), "shards": len(orphans),
                  "bytes": sum(shard.size_bytes for shard in orphans)}
        if dry_run:
            return report
        if gone:
            session.execute(delete(UploadSession).where(UploadSession.id.in_([u.id for u in gone])))
        if orphans:
            # a version committed meanwhile holds it now: the condition keeps its shard
            session.execute(delete(Shard).where(Shard.sha256.in_([s.sha256 for s in orphans]),
                                                ~exists().where(DatasetObject.sha256 == Shard.sha256)))
    for shard in orphans:
        with registry.store.transaction() as session:
            if session.get(Shard, shard.sha256) is None:  # its row is gone: nothing names the blob
                registry.blobs.remove(shard.sha256)
    return report


def _done_with(upload: UploadSession, now) -> bool:
    if upload.phase == UploadPhase.REFUSED:
        return as_utc(upload.created_at) <= now - REFUSED_GRACE
    return as_utc(upload.expires_at) <= now



class Collector:
    """Runs `collect` every `every` seconds on a thread of the server (the first run one period after start)."""

    def __init__(self, registry, every: float) -> None:
        self.registry = registry
        self.every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="collector", daemon=True)

    def start(self) -> None:
        if self.every > 0:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            try:
                report = collect(self.registry)
            except Exception:  # noqa: BLE001 - one failed pass (a busy store) waits for the next
                log.exception("the collector's pass failed")
                continue
            if report["uploadSessions"] or report["shards"]:
                log.info("collected %s upload session(s) and %s shard(s) (%s bytes)", report["uploadSessions"],
                         report["shards"], report["bytes"])
