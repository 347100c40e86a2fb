"""The collector, against a real server whose uploads expire after 2 s and whose blobs have no grace: a refused
upload closes its session, and `akka server gc` removes expired sessions, the shards no version holds (rows and
blobs) and the blobs nothing references, never a shard a version holds, even while registrations go on (sending
again the bytes of old orphans). On the session's trained run: an orphan older than the grace goes, and every blob
its datasets, snapshots, model and analyses name stays (tests/unit/test_blob_collection.py covers the rules on both
stores)."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname

import httpx
import pytest

from optimize.client.http import ApiError, OptimizeClient
from optimize.client.registry import register_dataset
from optimize.core.refs import parse_reference
from tests.conftest import Cli, chat_row, start_server, write_jsonl

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def short_lived(tmp_path_factory):
    proc = start_server(tmp_path_factory.mktemp("collection"),
                        env={"OPTIMIZE_UPLOAD_EXPIRY_SECONDS": "2", "OPTIMIZE_GC_SECONDS": "0",
                             "OPTIMIZE_GC_BLOB_GRACE_SECONDS": "0"})
    yield proc
    proc.stop()


def blob_path(proc, sha256: str) -> Path:
    return proc.data_dir / "blobs" / "sha256" / sha256[:2] / sha256[2:4] / sha256


def test_a_refused_upload_is_closed_and_gc_removes_what_no_version_holds(short_lived, capsys, tmp_path):
    cli = Cli(capsys, short_lived.url)
    kept = write_jsonl(tmp_path / "kept.jsonl", [chat_row("kept")])
    cli.ok("registry", "datasets", "register", "gc/kept", "-f", str(kept))
    # a shard sent but never committed
    orphan = write_jsonl(tmp_path / "orphan.jsonl", [chat_row("orphan")]).read_bytes()
    orphan_sha = hashlib.sha256(orphan).hexdigest()
    shard = {"index": 0, "path": "examples.jsonl", "sha256": orphan_sha, "bytes": len(orphan), "lines": 1}
    url = f"{short_lived.url}/v1/registry/dataset-uploads"
    session = httpx.post(url, headers=short_lived.headers,
                         json={"dataset": "gc/orphan", "format": "chat-jsonl-v1", "shards": [shard]}).json()
    assert httpx.put(f"{url}/{session['uploadId']}/shards/0", headers=short_lived.headers,
                     content=orphan).status_code == 201
    # a refused upload closes its session: it cannot be committed, and the same content opens it again
    bad = b'{"messages": [{"role": "user", "content": "no answer"}]}\n'
    bad_shard = {"index": 0, "path": "examples.jsonl", "sha256": hashlib.sha256(bad).hexdigest(), "bytes": len(bad),
                 "lines": 1}
    body = {"dataset": "gc/bad", "format": "chat-jsonl-v1", "shards": [bad_shard]}
    refused = httpx.post(url, headers=short_lived.headers, json=body).json()
    assert httpx.put(f"{url}/{refused['uploadId']}/shards/0", headers=short_lived.headers,
                     content=bad).status_code == 422
    committed = httpx.post(f"{url}/{refused['uploadId']}/commit", headers=short_lived.headers, json={})
    assert committed.status_code == 409 and "was refused" in committed.json()["detail"]
    assert httpx.post(url, headers=short_lived.headers, json=body).json()["phase"] == "open"
    time.sleep(2.5)  # past the uploads' expiry
    counted = cli.json("server", "gc", "--dry-run")
    # kept's (committed), orphan's and bad's (opened again) sessions, all past their expiry; orphan's shard only
    assert counted == {"dryRun": True, "uploadSessions": 3, "shards": 1, "bytes": len(orphan), "blobs": 0,
                       "blobBytes": 0, "unreadableManifests": []}
    assert blob_path(short_lived, orphan_sha).exists()  # a dry run removes nothing
    assert cli.ok("server", "gc").out.startswith("Removed 3 upload session(s), 1 shard(s)")
    assert not blob_path(short_lived, orphan_sha).exists()
    version = cli.json("registry", "datasets", "get", "gc/kept")
    assert Path(url2pathname(urlparse(version["objects"][0]["location"]).path)).exists()
    assert cli.json("server", "gc")["shards"] == 0  # nothing left to remove
    reader = cli.json("auth", "tokens", "create", "gc-trainer", "--role", "trainer")["token"]
    assert "needs the admin role" in cli("server", "gc", "--token", reader).err


def test_gc_never_removes_a_shard_a_version_holds_while_registrations_go_on(short_lived, tmp_path):
    files = [write_jsonl(tmp_path / f"{i}.jsonl", [chat_row(f"busy {i}")]) for i in range(12)]
    for path in files[::2]:  # half of them held already as blobs nothing names, an hour old: sent again
        age(write_blob(short_lived, path.read_bytes()), 3600)
    stop = threading.Event()

    def collect_all_the_time():
        with OptimizeClient(short_lived.url, token=short_lived.token) as client:
            while not stop.is_set():
                client.post("/v1/admin/gc")

    def register(path):
        with OptimizeClient(short_lived.url, token=short_lived.token) as client:
            for _ in range(3):  # a shard collected between its send and its commit is sent again by the same call
                try:
                    return register_dataset(client, parse_reference("gc/busy"), path)
                except ApiError as error:
                    if error.status != 409:
                        raise
            raise AssertionError(f"{path} could not be registered")

    collector = threading.Thread(target=collect_all_the_time)
    collector.start()
    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            versions = list(pool.map(register, files))
    finally:
        stop.set()
        collector.join()
    time.sleep(2.5)
    with OptimizeClient(short_lived.url, token=short_lived.token) as client:
        client.post("/v1/admin/gc")
        for version in versions:
            held = client.get(f"/v1/registry/datasets/gc/busy/versions/v{version['version']}")
            for item in held["objects"]:
                assert read_blob(short_lived, item["digest"]), item


def test_gc_frees_an_old_orphan_blob_and_keeps_every_blob_a_trained_run_names(sqlite_server, completed_run, capsys):
    cli = Cli(capsys, sqlite_server.url)
    project, run = completed_run["project"], completed_run["run"]
    named, lengths = set(), set()
    for dataset in ("chat", "valid"):
        version = cli.json("registry", "datasets", "get", f"{project}/{dataset}")
        named.update(item["digest"] for item in version["objects"])
        analyses = httpx.get(f"{sqlite_server.url}/v1/training/datasets/analyses", headers=sqlite_server.headers,
                             params={"dataset": f"{project}/{dataset}"}).json()["analyses"]
        lengths.update(a["rowLengths"] for a in analyses if a.get("rowLengths"))
    snapshots = httpx.get(f"{sqlite_server.url}/v1/training/runs/{run['runId']}/snapshots",
                          headers=sqlite_server.headers).json()["snapshots"]
    manifests = {a["manifestDigest"] for s in snapshots for a in s["artifacts"]}
    model = cli.json("registry", "models", "get", run["results"]["model"])
    manifests.add(model["servingModel"]["artifact"]["manifestDigest"])
    for manifest in manifests:
        named.update(f"sha256:{f['sha256']}" for f in json.loads(read_blob(sqlite_server, manifest))["files"])
    named |= manifests | lengths
    assert len(snapshots) == 3 and lengths and len(named) > 10
    for digest in named:  # all of them written long before the grace
        age(blob_path(sqlite_server, digest.removeprefix("sha256:")), 2 * 86400)
    orphan = age(write_blob(sqlite_server, b"nothing names these bytes"), 2 * 86400)

    counted = cli.json("server", "gc", "--dry-run")
    assert counted["dryRun"] and counted["blobs"] >= 1 and counted["blobBytes"] >= orphan.stat().st_size
    assert orphan.exists()
    assert "blob(s)" in cli.ok("server", "gc").out
    assert not orphan.exists()
    for digest in named:
        assert read_blob(sqlite_server, digest), digest  # held, with the bytes its name promises


def write_blob(proc, content: bytes) -> Path:
    """Bytes put in the server's blob store directly, as if an earlier upload left them."""
    path = blob_path(proc, hashlib.sha256(content).hexdigest())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def age(path: Path, seconds: float) -> Path:
    moment = time.time() - seconds
    os.utime(path, (moment, moment))
    return path


def read_blob(proc, digest: str) -> bytes:
    sha256 = digest.removeprefix("sha256:")
    content = blob_path(proc, sha256).read_bytes()
    assert hashlib.sha256(content).hexdigest() == sha256
    return content
