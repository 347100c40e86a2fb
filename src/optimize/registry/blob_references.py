"""Every blob the store's rows still name, for the collector: what it must never remove.

A blob is referenced by
- a dataset shard row (`shards`; the shard collector owns those, with the `dataset_objects` that point at them) or
  any upload session's manifest (a shard on its way);
- a snapshot's artifact kinds retention has not swept, and every kind of a snapshot an unfinished run may still
  restore (its newest save holding training state, the save its `resumed` or `pause` names); a run's swept kinds
  only once its last sweep is older than the grace (a branch or a registration that read the kind just before the
  sweep commits within it);
- an unfinished branch's `branch.artifacts` (a running branch holds what it reads until it is terminal);
- a model version's descriptor, an evaluation's model (and judge), a curation's judge, an endpoint's adapters: their
  manifests;
- an analysis' per-row lengths (`lengths_sha256`);
- a bundle version's archive (`bundle_versions.sha256`);
- a session's candidates (`sessions.sha256`, the session hash);
- an image of chat rows (`registry_images`, and those a version's or an upload's rows name: `images`);
and, through each manifest named (JSON listing `files` by `sha256`), every file it lists. A manifest that cannot be
read (missing, corrupt, not a manifest) is reported: its files are unknown, so no blob is removed meanwhile.

Rows name manifests by `manifestDigest` (`sha256:HEX`) or `manifestSha256` (HEX), wherever they nest in the JSON.
`COLUMNS` lists every column read here; a unit test fails on any table column that could hold a digest and is
neither read here nor declared free of blob digests, so a new producer cannot be forgotten.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from optimize.blobs.manifests import listed_files
from optimize.core.clock import as_utc
from optimize.store.tables import (
    Analysis,
    BundleVersion,
    ConversationSession,
    Curation,
    DatasetVersion,
    Distillation,
    Endpoint,
    Evaluation,
    Event,
    JobLease,
    ModelVersion,
    RegistryImage,
    Run,
    Shard,
    Snapshot,
    UploadSession,
)

COLUMNS = frozenset({
    "shards.sha256", "dataset_objects.sha256", "upload_sessions.manifest", "snapshots.artifacts", "snapshots.swept",
    "runs.branch", "runs.resumed", "runs.pause", "model_versions.descriptor", "evaluations.model",
    "distillations.teacher", "endpoints.adapters", "analyses.lengths_sha256", "bundle_versions.sha256",
    "sessions.sha256", "curations.judge", "registry_images.sha256", "dataset_versions.images",
    "upload_sessions.images",
})
MANIFEST_KEYS = ("manifestDigest", "manifestSha256")


@dataclass
class References:
    blobs: set[str] = field(default_factory=set)  # every digest named, manifests and the files they list
    unreadable: list[str] = field(default_factory=list)  # manifests named whose files could not be read
    live_since: datetime | None = None  # when the oldest open job lease was granted (its uploads are kept)


def references(session: Session, blobs: Any, now: datetime, grace: timedelta) -> References:
    """Read in one transaction; on PostgreSQL at REPEATABLE READ, so every table is read as of one moment. SQLite
    gives each statement its own moment, so the order counts: the open leases first (a job commits every row naming
    what it wrote before its lease ends, so a lease closed by then left its rows for the reads after), and the
    snapshots before the sweep events (a sweep committed between the two shows as recent and keeps what it swept)."""
    if session.get_bind().dialect.name == "postgresql":
        session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
    found = References()
    found.live_since = session.scalar(select(func.min(JobLease.granted_at)).where(JobLease.ended_at.is_(None)))
    found.blobs.update(session.scalars(select(Shard.sha256)))
    for manifest in session.scalars(select(UploadSession.manifest)):
        found.blobs.update(str(item.get("sha256")) for item in manifest or [] if isinstance(item, dict))
    manifests = set(_snapshot_manifests(session, now, grace))
    for branch, in session.execute(select(Run.branch).where(Run.finished_at.is_(None), Run.branch.is_not(None))):
        manifests.update(_named_manifests(branch))
    for column in (ModelVersion.descriptor, Evaluation.model, Distillation.teacher, Curation.judge, Endpoint.adapters):
        for value in session.scalars(select(column)):
            manifests.update(_named_manifests(value))
    found.blobs.update(session.scalars(select(Analysis.lengths_sha256).where(Analysis.lengths_sha256.is_not(None))))
    found.blobs.update(session.scalars(select(BundleVersion.sha256)))
    found.blobs.update(session.scalars(select(ConversationSession.sha256)))
    found.blobs.update(session.scalars(select(RegistryImage.sha256)))
    for column in (DatasetVersion.images, UploadSession.images):
        for listed in session.scalars(select(column).where(column.is_not(None))):
            found.blobs.update(str(item.get("sha256")) for item in listed or [] if isinstance(item, dict))
    for manifest in sorted(manifests):
        files = listed_files(blobs, manifest)
        if files is None:
            found.unreadable.append(manifest)
        found.blobs.add(manifest)
        found.blobs.update(files or ())
    return found


def _snapshot_manifests(session: Session, now: datetime, grace: timedelta) -> Iterator[str]:
    snapshots = session.scalars(select(Snapshot).order_by(Snapshot.run_id, Snapshot.step.desc(),
                                                          Snapshot.attempt.desc())).all()
    named = {run.id: {(run.resumed or {}).get("snapshotId"), (run.pause or {}).get("snapshotId")}
             for run in session.scalars(select(Run).where(Run.finished_at.is_(None)))}  # the unfinished runs
    swept_at = {subject: as_utc(at) for subject, at in session.execute(  # read after the snapshots (see above)
        select(Event.subject, func.max(Event.at)).where(Event.kind == "swept").group_by(Event.subject))}
    with_restore_point = set()
    for snapshot in snapshots:  # a run's newest first: its first one holding training state is its restore point
        released = set(snapshot.swept or [])
        if snapshot.run_id in named and snapshot.run_id not in with_restore_point and any(
                a["kind"] == "trainingState" and a["kind"] not in released for a in snapshot.artifacts):
            with_restore_point.add(snapshot.run_id)
            released = set()
        if snapshot.id in named.get(snapshot.run_id, ()):
            released = set()
        last_sweep = swept_at.get(f"run:{snapshot.run_id}")
        if last_sweep is None or last_sweep > now - grace:
            released = set()  # swept within the grace (or by no recorded sweep): held a while longer
        yield from (_digest(a["manifestDigest"]) for a in snapshot.artifacts if a["kind"] not in released)


def _named_manifests(value: Any) -> Iterator[str]:
    """The manifest digests a JSON value names under MANIFEST_KEYS, at any depth."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in MANIFEST_KEYS and isinstance(item, str):
                yield _digest(item)
            else:
                yield from _named_manifests(item)
    elif isinstance(value, list):
        for item in value:
            yield from _named_manifests(item)


def _digest(text: str) -> str:
    return text.removeprefix("sha256:")
