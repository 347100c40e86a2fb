"""The blob collector against a real store (SQLite and PostgreSQL) and a blob folder: it frees what no row
references once it is older than the grace and than every live job, keeps whatever a row names (the files of the
manifests too), lets go of what retention swept only after the grace and never of a save an unfinished run may
restore, stops while a referenced manifest cannot be read, and never loses a blob referenced while it collects."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import threading
import time
from datetime import timedelta

import pytest
from sqlalchemy import JSON, update

import optimize.registry.collection as collection
from optimize.blobs.local import LocalBlobStore
from optimize.core.clock import utcnow
from optimize.core.limits import DatasetLimits
from optimize.registry.blob_references import COLUMNS
from optimize.registry.collection import ASIDE, collect
from optimize.registry.uploads import Registry
from optimize.store.tables import (
    Analysis,
    Base,
    Endpoint,
    Evaluation,
    Event,
    JobLease,
    Model,
    ModelVersion,
    Namespace,
    Project,
    Run,
    Shard,
    Snapshot,
    UploadSession,
)
from tests.conftest import migrated_store

HOUR = 3600
_counter = itertools.count()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def registry(request, tmp_path):
    store = migrated_store(request.param, tmp_path)
    with store.transaction() as session:
        session.add(Project(name="p", archived=False, created_at=utcnow()))
        session.add(Namespace(name="p", archived=False, created_at=utcnow()))
    yield Registry(store, LocalBlobStore(tmp_path / "blobs"), DatasetLimits())
    store.dispose()


def put(registry, content: bytes | None = None, age: float = 2 * HOUR) -> str:
    """Store bytes (fresh ones when none are given) written `age` seconds ago; their digest."""
    content = content if content is not None else f"blob {next(_counter)} {time.time_ns()}".encode()
    sha = hashlib.sha256(content).hexdigest()
    writer = registry.blobs.writer()
    writer.write(content)
    writer.commit(sha)
    if age:
        moment = time.time() - age
        os.utime(registry.blobs.path_for(sha), (moment, moment))
    return sha


def manifest(registry, age: float = 2 * HOUR) -> tuple[str, list[str]]:
    """A save's manifest listing two files of its own: (manifest digest, file digests)."""
    files = [put(registry, age=age) for _ in range(2)]
    listed = [{"path": f"f{i}", "sha256": sha, "bytes": 1} for i, sha in enumerate(files)]
    return put(registry, json.dumps({"kind": "weights", "files": listed}).encode(), age=age), files


def held(registry, sha: str) -> bool:
    return registry.blobs.holds(sha)


def add_run(session, finished: bool = False, **columns) -> Run:
    n = f"{next(_counter):08d}"
    run = Run(id=f"run{n}", submission_id=n, submission_digest="d", project="p", method="sft", phase="TRAINING",
              attempt=1, plan={}, resolved={"execution": {}}, sources={}, config_hash="h", base_entry_id="b",
              base_commit="c", dataset_reference="r", dataset_digest="d", dataset_rows=1, model_name="m",
              device_profile="cpu", device_count=1, phase_times={}, created_at=utcnow(),
              finished_at=utcnow() if finished else None, **columns)
    session.add(run)
    session.flush()
    return run


def add_snapshot(session, run: Run, step: int, artifacts: dict[str, str], swept=None) -> Snapshot:
    snapshot = Snapshot(id=f"snap{next(_counter):08d}", run_id=run.id, attempt=1, step=step,
                        artifacts=[{"kind": kind, "manifestDigest": f"sha256:{sha}", "bytes": 1}
                                   for kind, sha in artifacts.items()],
                        committed_at=utcnow(), swept=swept)
    session.add(snapshot)
    session.flush()
    return snapshot


def swept(session, run: Run, ago: float) -> None:
    session.add(Event(at=utcnow() - timedelta(seconds=ago), subject=f"run:{run.id}", kind="swept", data={}))


def test_orphans_go_and_every_reference_stays(registry):
    orphan, young = put(registry, b"orphan"), put(registry, b"young", age=60)
    shard, uploading, lengths = put(registry), put(registry), put(registry)
    saves = {name: manifest(registry) for name in ("snapshot", "model", "evaluation", "judge", "endpoint", "branch")}
    with registry.store.transaction() as session:
        now = utcnow()
        session.add(Shard(sha256=shard, kind="chat", size_bytes=1, rows=1, lines=1, tool_rows=0, created_at=now))
        session.add(UploadSession(id="up1", content_key="k", namespace="p", name="d", format="chat-jsonl-v1",
                                  digest="d", manifest=[{"index": 0, "sha256": uploading}], phase="open",
                                  created_at=now, expires_at=now + timedelta(days=7)))
        run = add_run(session, branch={"artifacts": [{"kind": "weights",
                                                      "manifestDigest": f"sha256:{saves['branch'][0]}"}]})
        add_snapshot(session, run, 6, {"weights": saves["snapshot"][0]})
        session.add(Model(id=1, namespace="p", name="m", created_at=now))
        session.add(ModelVersion(model_id=1, version=1, digest="sha256:x", variant="ADAPTER", lineage={},
                                 descriptor={"artifact": {"manifestDigest": f"sha256:{saves['model'][0]}"}},
                                 created_at=now))
        session.add(Analysis(id="an1", examples_digest="e", kind="chat", base_entry_id="b", base_commit="c",
                             optimize_version="v", dataset_reference="r", phase="done", lengths_sha256=lengths,
                             created_at=now))
        session.add(Evaluation(id="ev1", project="p", model_reference="m", dataset_reference="r", dataset_digest="d",
                               dataset_rows=1, grader="g", device_profile="cpu", phase="DONE", progress={},
                               created_at=now, model={"manifestDigest": f"sha256:{saves['evaluation'][0]}",
                                                      "judge": {"manifestDigest": f"sha256:{saves['judge'][0]}"}}))
        session.add(Endpoint(id="ep1", project="p", model_reference="m", base={}, device_profile="cpu",
                             phase="READY", created_at=now,
                             adapters=[{"name": "a", "manifestDigest": f"sha256:{saves['endpoint'][0]}"}]))
    referenced = [shard, uploading, lengths, *(d for m, files in saves.values() for d in (m, *files))]

    counted = collect(registry, dry_run=True)
    assert counted.dry_run and counted.blobs == 1 and counted.blob_bytes == len(b"orphan")
    assert held(registry, orphan)
    freed = collect(registry)
    assert (freed.blobs, freed.blob_bytes, freed.unreadable_manifests) == (1, len(b"orphan"), [])
    assert not held(registry, orphan) and held(registry, young)
    assert all(held(registry, sha) for sha in referenced)
    assert collect(registry).blobs == 0
    assert collect(registry, grace=timedelta(0)).blobs == 1  # the young one, once no grace is left


def test_swept_kinds_go_after_the_grace_but_never_a_save_an_unfinished_run_may_restore(registry):
    old_sweep, new_sweep = manifest(registry), manifest(registry)
    restore_weights, restore_state, resumed_weights = manifest(registry), manifest(registry), manifest(registry)
    done_branch = manifest(registry)
    with registry.store.transaction() as session:
        finished = add_run(session, finished=True, branch={"artifacts": [
            {"kind": "weights", "manifestDigest": f"sha256:{done_branch[0]}"}]})
        add_snapshot(session, finished, 6, {"weights": old_sweep[0]}, swept=["weights"])
        swept(session, finished, ago=2 * HOUR)
        recent = add_run(session, finished=True)
        add_snapshot(session, recent, 6, {"weights": new_sweep[0]}, swept=["weights"])
        swept(session, recent, ago=60)
        training = add_run(session)
        resumed = add_snapshot(session, training, 3, {"weights": resumed_weights[0]}, swept=["weights"])
        add_snapshot(session, training, 6, {"weights": restore_weights[0], "trainingState": restore_state[0]},
                     swept=["weights"])
        session.execute(update(Run).where(Run.id == training.id).values(resumed={"snapshotId": resumed.id}))
        swept(session, training, ago=2 * HOUR)
    collect(registry)
    for gone in (old_sweep, done_branch):
        assert not any(held(registry, sha) for sha in (gone[0], *gone[1]))
    for kept in (new_sweep, restore_weights, restore_state, resumed_weights):
        assert all(held(registry, sha) for sha in (kept[0], *kept[1]))


def test_what_a_live_job_wrote_stays_until_it_has_ended(registry):
    during, before = put(registry, age=2 * HOUR), put(registry, age=4 * HOUR)
    with registry.store.transaction() as session:
        session.add(JobLease(token="t1", kind="run", job_id="r", attempt=1, devices=[],
                             granted_at=utcnow() - timedelta(hours=3), expires_at=utcnow() + timedelta(minutes=1)))
    assert collect(registry).blobs == 1
    assert held(registry, during) and not held(registry, before)
    with registry.store.transaction() as session:
        session.execute(update(JobLease).values(ended_at=utcnow()))
    assert collect(registry).blobs == 1 and not held(registry, during)


def test_no_blob_goes_while_a_referenced_manifest_cannot_be_read(registry):
    orphan, lost = put(registry), put(registry)
    registry.blobs.remove(lost)
    with registry.store.transaction() as session:
        session.add(Model(id=1, namespace="p", name="m", created_at=utcnow()))
        session.add(ModelVersion(model_id=1, version=1, digest="sha256:x", variant="ADAPTER", lineage={},
                                 descriptor={"artifact": {"manifestDigest": f"sha256:{lost}"}}, created_at=utcnow()))
    report = collect(registry)
    assert (report.blobs, report.unreadable_manifests) == (0, [f"sha256:{lost}"])
    assert held(registry, orphan)


def test_a_blob_referenced_or_written_again_while_it_is_collected_stays(registry, monkeypatch):
    """The two races the move aside closes: a row naming the blob committed, or a fresh copy uploaded, between the
    first reading of references and the removal."""
    named, rewritten, orphan = put(registry, b"named later"), put(registry, b"written again"), put(registry)
    first_reading = collection.references
    calls = []

    def references(session, blobs, now, grace):
        calls.append(1)
        if len(calls) == 2:  # every candidate is aside now: another writer commits a row, another uploads
            assert not held(registry, named) and not held(registry, rewritten)
            with registry.store.transaction() as other:
                other.add(Analysis(id="an1", examples_digest="e", kind="chat", base_entry_id="b", base_commit="c",
                                   optimize_version="v", dataset_reference="r", phase="done", lengths_sha256=named,
                                   created_at=utcnow()))
            put(registry, b"written again", age=0)
        return first_reading(session, blobs, now, grace)

    monkeypatch.setattr(collection, "references", references)
    assert collect(registry).blobs == 2  # the orphan, and the moved copy of the one written again
    assert held(registry, named) and held(registry, rewritten) and not held(registry, orphan)
    assert not list((registry.blobs.root / ASIDE).iterdir())


def test_a_pass_stopped_midway_puts_back_what_it_had_moved_aside(registry):
    referenced = put(registry)
    with registry.store.transaction() as session:
        session.add(Analysis(id="an1", examples_digest="e", kind="chat", base_entry_id="b", base_commit="c",
                             optimize_version="v", dataset_reference="r", phase="done", lengths_sha256=referenced,
                             created_at=utcnow()))
    aside = registry.blobs.root / ASIDE
    aside.mkdir()
    os.rename(registry.blobs.path_for(referenced), aside / f"{referenced}.x1")
    collect(registry)
    assert held(registry, referenced) and not list(aside.iterdir())


def test_a_referenced_blob_is_never_lost_while_jobs_and_registrations_go_on(registry):
    """Writers upload under a live lease and then commit a row naming what they wrote, or upload again an old
    orphan's bytes and name it; the collector runs all along with no grace. Every blob named at the end is held."""
    olds = [f"old orphan {i}".encode() for i in range(12)]
    for content in olds:
        put(registry, content)
    stop, failures, named = threading.Event(), [], []

    def collect_all_the_time():
        while not stop.is_set():
            try:
                collect(registry, grace=timedelta(0))
            except Exception as error:  # noqa: BLE001 - reported below
                failures.append(error)

    def write(worker: int):
        for i in range(6):
            token = f"lease-{worker}-{i}"
            with registry.store.transaction() as session:
                session.add(JobLease(token=token, kind="analysis", job_id=token, attempt=1, devices=[],
                                     granted_at=utcnow(), expires_at=utcnow() + timedelta(minutes=1)))
            content = olds[(worker * 6 + i) % len(olds)] if i % 2 else None
            sha = put(registry, content, age=0)
            with registry.store.transaction() as session:
                session.add(Analysis(id=token, examples_digest=token, kind="chat", base_entry_id="b",
                                     base_commit="c", optimize_version="v", dataset_reference="r", phase="done",
                                     lengths_sha256=sha, created_at=utcnow()))
                session.execute(update(JobLease).where(JobLease.token == token).values(ended_at=utcnow()))
            named.append(sha)

    collector = threading.Thread(target=collect_all_the_time)
    collector.start()
    try:
        writers = [threading.Thread(target=write, args=(n,)) for n in range(3)]
        for thread in writers:
            thread.start()
        for thread in writers:
            thread.join()
    finally:
        stop.set()
        collector.join()
    assert not failures, failures
    collect(registry, grace=timedelta(0))
    for sha in named:
        assert hashlib.sha256(registry.blobs.verified_path(sha).read_bytes()).hexdigest() == sha


# Columns that could hold a digest and name no blob: version digests (derived from their shards' digests, not
# stored), token and template digests, and JSON of other things. Any other such column must be read by the walk.
NOT_BLOBS = {
    "analyses.examples_digest", "analyses.report", "analyses.progress", "api_tokens.digest", "api_tokens.projects",
    "api_tokens.namespaces", "base_model_additions.entry", "base_model_selections.content_digest", "events.data",
    "job_leases.devices", "endpoints.base", "endpoints.devices", "endpoints.load", "evaluations.dataset_digest",
    "evaluations.devices",
    "evaluations.progress", "evaluations.report", "runs.submission_digest", "runs.plan", "runs.resolved",
    "runs.sources", "runs.dataset_digest", "runs.validation_digest", "runs.warnings", "runs.progress", "runs.checks",
    "runs.length_check", "runs.results", "runs.cost", "runs.phase_times", "runs.prediction", "runs.memory",
    "runs.guards",
    "dataset_versions.digest", "dataset_versions.conversion", "evaluation_predictions.fields",
    "evaluation_predictions.samples",
    "evaluation_predictions.chat_template_sha256", "model_versions.digest", "model_versions.lineage",
    "run_attempts.devices", "run_metrics.values", "snapshots.pinned", "snapshots.registered",
    "upload_sessions.digest", "upload_sessions.conversion", "bundle_versions.members", "run_rollouts.items",
    "dataset_versions.lineage", "distillations.source_digest", "distillations.settings", "distillations.devices",
    "distillations.progress", "distillations.smoke", "distillations.registered", "distillations.submission_digest",
    "dataset_versions.prepared", "upload_sessions.prepared",
    "distillation_answers.row",
    "comparisons.dataset_digest", "comparisons.entries", "comparisons.result", "pipelines.plan", "pipelines.stages",
    "runs.pipeline", "sessions.skipped",
    # a curation's sessions name session hashes, whose blobs their `sessions` rows keep (`sessions.sha256`)
    "curations.sessions", "curations.request_digest", "curations.devices", "curations.progress",
    "curations.registered",
}


def test_every_column_that_could_name_a_blob_is_read_by_the_walk_or_declared_free_of_them():
    columns = {f"{table.name}.{column.name}" for table in Base.metadata.sorted_tables for column in table.columns
               if isinstance(column.type, JSON) or any(w in column.name for w in ("sha", "digest", "manifest"))}
    unclassified = columns - COLUMNS - NOT_BLOBS
    assert not unclassified, f"say whether {sorted(unclassified)} name blobs (in COLUMNS) or not (in NOT_BLOBS)"
    assert not (COLUMNS | NOT_BLOBS) - columns, "a column listed is no longer in the tables"
