"""The collector: removes what nothing will use again, and reports what it freed.

- Upload sessions: open ones past their expiry, committed ones past it (their version stays), refused ones after
  REFUSED_GRACE (time for the client to hear every bad line).
- Dataset shards that no version holds and no live session names, received more than the upload expiry ago
  (a registration may still be on its way to commit them before that): their rows and their blobs.
- Blobs no row references (`blob_references`: shards, uploads, snapshots, branches, model versions, evaluations,
  endpoints, analyses, and the files their manifests list), written before the blob grace
  (OPTIMIZE_GC_BLOB_GRACE_SECONDS, default an hour) and before the oldest open job lease was granted. Workers upload
  a save's files, then its manifest, then commit the record naming them, and a slow save may take longer than the
  grace: every write of a worker carries its lease, so what any live job wrote is kept until it has ended (its
  record committed, or never to be, the lease being fenced). Staging and quarantine are left alone.
Run by the server every OPTIMIZE_GC_SECONDS (default an hour) and by `akka server gc [--dry-run]`.

Never a referenced blob. A new reference to an old blob nothing names is made either by uploading it again (the
write replaces the file, so its mtime is fresh) or by copying a row's reference (then it was referenced: not a
candidate; of the references that lapse, only a swept snapshot kind is ever copied from, after a check that it is
not swept, so it is kept for the grace after its sweep). The collector moves each candidate aside (the store's move:
an atomic rename in a local folder, what it then judges being exactly the file it would remove; in a bucket, a copy
the bucket makes only if the object was not written since the cutoff, then its deletion), reads every reference
again, and puts back any that is referenced now or whose file is fresh (uploaded again just before the move); a copy
uploaded after the move lands in the store beside it and is never touched (in a bucket, an upload refused because
the object is there makes it fresh instead). What is left of a race is a blob missing for that moment to a reader
of one nothing referenced: a commit checking it then is refused (a dataset client sends the shard again), never
left naming a blob that is gone.
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta
from typing import Any

from sqlalchemy import delete, exists, select

from optimize.blobs.local import ASIDE  # noqa: F401 - where the local store's candidates wait (tests read it)
from optimize.core.clock import as_utc, utcnow
from optimize.core.environment import setting
from optimize.registry.blob_references import References, references
from optimize.registry.upload_phases import UploadPhase
from optimize.schemas.admin import Collected
from optimize.store.tables import DatasetObject, Shard, UploadSession

REFUSED_GRACE = timedelta(minutes=10)
BLOB_GRACE_SECONDS = 3600.0
_ONE_PASS = threading.Lock()  # the server's own passes and `akka server gc` take turns: what is aside is one pass's
log = logging.getLogger("optimize.collector")


def blob_grace() -> timedelta:
    """OPTIMIZE_GC_BLOB_GRACE_SECONDS, or an hour where it is unset or not a number of seconds."""
    try:
        seconds = setting("OPTIMIZE_GC_BLOB_GRACE_SECONDS")
    except ValueError:
        seconds = BLOB_GRACE_SECONDS
    return timedelta(seconds=max(seconds, 0.0))


def collect(registry, dry_run: bool = False, grace: timedelta | None = None) -> Collected:
    with _ONE_PASS:
        report = {"dryRun": dry_run, **_collect_uploads(registry, dry_run)}
        return Collected(**report, **_collect_blobs(registry, blob_grace() if grace is None else grace, dry_run))


def _collect_uploads(registry, dry_run: bool) -> dict[str, Any]:
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
        report = {"uploadSessions": len(gone), "shards": len(orphans),
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


def _collect_blobs(registry, grace: timedelta, dry_run: bool) -> dict[str, Any]:
    blobs = registry.blobs  # the moves are the store's own: files renamed (local) or objects copied (S3)
    for left in blobs.left_aside():  # a pass that stopped midway: back first, then judged like every other
        blobs.put_back(left)
    found = _references(registry, grace)
    if found.unreadable:
        log.warning("no blob is collected while referenced manifests cannot be read: %s", ", ".join(found.unreadable))
        return {"blobs": 0, "blobBytes": 0, "unreadableManifests": [f"sha256:{d}" for d in found.unreadable]}
    cutoff = _written_before(found, grace)
    candidates = [(sha, size) for sha, size, mtime in blobs.listed() if sha not in found.blobs and mtime < cutoff]
    if dry_run or not candidates:
        return {"blobs": len(candidates), "blobBytes": sum(size for _, size in candidates), "unreadableManifests": []}
    moved = [(size, aside) for sha, size in candidates if (aside := blobs.set_aside(sha, cutoff))]
    found = _references(registry, grace)  # read again, once every candidate is out of reach
    cutoff = _written_before(found, grace)
    freed = []
    for size, aside in moved:
        if found.unreadable or aside.sha256 in found.blobs or aside.written >= cutoff:
            blobs.put_back(aside)
        else:
            blobs.discard(aside)
            freed.append(size)
    return {"blobs": len(freed), "blobBytes": sum(freed), "unreadableManifests": []}


def _references(registry, grace: timedelta) -> References:
    with registry.store.transaction() as session:
        return references(session, registry.blobs, utcnow(), grace)


def _written_before(found: References, grace: timedelta) -> float:
    """The mtime a blob must be older than to be collected: the grace, and the oldest live job's grant."""
    cutoff = (utcnow() - grace).timestamp()
    return cutoff if found.live_since is None else min(cutoff, as_utc(found.live_since).timestamp())


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
            if report.upload_sessions or report.shards or report.blobs:
                log.info("collected %s upload session(s), %s shard(s) (%s bytes) and %s blob(s) (%s bytes)",
                         report.upload_sessions, report.shards, report.size_bytes, report.blobs, report.blob_bytes)
