"""A server whose blobs live in an S3-compatible bucket (`akka server start --blob-store s3://BUCKET/PREFIX`), driven
through the CLI. The bucket is a real S3-compatible server, SeaweedFS (`weed mini`, tests/s3_server.py), on 127.0.0.1;
one of each for the module.

A dataset registered (an upload interrupted, then resumed: only the missing shards are sent) lands in the bucket
under its digests; a short training run reads it (its worker follows the server's redirects to presigned GETs) and
its saves land in the bucket; the trained adapter downloads through the server, read back from the bucket; and the
collector removes from the bucket an object nothing names, keeping everything named. A bad URL or a missing bucket
refuses the start with one line."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time

import pytest

from tests.conftest import Cli, start_server
from tests.integration.test_shards_and_uploads import many_rows
from tests.run_fixtures import capitals_project, plan, write_plan

pytestmark = pytest.mark.integration
BUCKET, PREFIX = "optimize-blobs", "deployment-a"


@pytest.fixture(scope="module")
def on_s3(s3, tmp_path_factory):
    s3.create_bucket(BUCKET)
    proc = start_server(tmp_path_factory.mktemp("on-s3"), extra_args=["--blob-store", f"s3://{BUCKET}/{PREFIX}"],
                        env={**s3.env, "OPTIMIZE_GC_SECONDS": "0", "OPTIMIZE_GC_BLOB_GRACE_SECONDS": "0"})
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def trained(on_s3, tmp_path_factory):
    """A project of capitals trained 4 updates, saving every 2 (its worker reads the dataset from the bucket)."""
    project = capitals_project(on_s3.url, tmp_path_factory.mktemp("trained"), "s3")
    document = plan(project["name"], "chat")
    document["config"]["hyperparams"]["training"] = {"maxSteps": 4, "batchSize": 4}
    document["execution"]["saveEvery"] = 2
    from optimize.cli.main import main

    path = write_plan(project["tmp"], document)
    command = ["training", "runs", "start", "-f", path, "--force", "--wait", "--exit-status", "--server", on_s3.url]
    assert main(command) == 0
    runs = project["client"].get("/v1/training/runs", params={"project": project["name"]}).json()["runs"]
    return {**project, "run": runs[0]}


def key(sha256: str) -> str:
    return f"{PREFIX}/sha256/{sha256[:2]}/{sha256[2:4]}/{sha256}"


def in_bucket(s3, sha256: str) -> bool:
    listing = s3.client().list_objects_v2(Bucket=BUCKET, Prefix=key(sha256))
    return listing.get("KeyCount", 0) == 1


def test_the_server_says_where_its_blobs_live(on_s3, capsys):
    assert f"blobs in s3://{BUCKET}/{PREFIX}" in on_s3.log.read_text()
    cli = Cli(capsys, on_s3.url)
    assert cli.json("registry", "info")["blobs"] == f"s3://{BUCKET}/{PREFIX}"
    assert f"Blobs         s3://{BUCKET}/{PREFIX}" in cli.ok("registry", "info").out


def test_a_dataset_lands_in_the_bucket_and_an_interrupted_upload_resumes(s3, on_s3, capsys, tmp_path):
    path = many_rows(tmp_path / "d.jsonl", 300)
    command = [sys.executable, "-m", "optimize", "registry", "datasets", "register", "s3ns/d", "-f", str(path),
               "--shard-size", "16KiB", "--server", on_s3.url, "-o", "json"]
    crashed = subprocess.run(command, env={**os.environ, "OPTIMIZE_CRASH_AT": "client.upload.after_shard:2"},
                             capture_output=True, text=True, timeout=120)
    assert crashed.returncode == -9
    cli = Cli(capsys, on_s3.url)
    version = cli.json("registry", "datasets", "register", "s3ns/d", "-f", str(path), "--shard-size", "16KiB")
    assert version["upload"]["alreadyHeld"] == 2 and version["upload"]["sent"] == version["upload"]["shards"] - 2
    got = cli.json("registry", "datasets", "get", "s3ns/d")
    assert got["digest"] == version["digest"] and got["examples"] == 300
    shards = path.read_bytes().splitlines(keepends=True)
    sent = b"".join(shards)
    stored = b""
    for item in got["objects"]:
        sha256 = item["digest"].removeprefix("sha256:")
        assert item["location"] == f"s3://{BUCKET}/{key(sha256)}"
        body = s3.client().get_object(Bucket=BUCKET, Key=key(sha256))["Body"].read()
        assert hashlib.sha256(body).hexdigest() == sha256
        stored += body
    assert stored == sent  # the shards, read back from the bucket, are the file


def test_a_runs_saves_land_in_the_bucket_and_its_adapter_downloads(s3, on_s3, trained, capsys, tmp_path):
    cli = Cli(capsys, on_s3.url)
    run = trained["run"]
    assert run["phase"] == "COMPLETED"
    snapshots = cli.json("training", "runs", "snapshots", run["runId"])["snapshots"]
    assert [s["step"] for s in snapshots][-1] == 4
    written: set[str] = set()
    for snapshot in snapshots:
        for artifact in snapshot["artifacts"]:
            manifest_hex = artifact["manifestDigest"].removeprefix("sha256:")
            assert in_bucket(s3, manifest_hex)
            manifest = json.loads(s3.client().get_object(Bucket=BUCKET, Key=key(manifest_hex))["Body"].read())
            assert manifest["files"] and all(in_bucket(s3, item["sha256"]) for item in manifest["files"])
            written.update(item["sha256"] for item in manifest["files"])
    cache = on_s3.data_dir / "blob-cache" / "sha256"
    # the worker wrote its saves' files to the bucket itself (presigned PUTs): none passed through the server
    assert written and not [h for h in written if (cache / h[:2] / h[2:4] / h).exists()]
    reference = run["results"]["model"]
    target = tmp_path / "adapter"
    cli.ok("registry", "models", "download", reference, "-d", str(target))
    assert (target / "adapter_model.safetensors").stat().st_size > 0


def test_the_collector_removes_from_the_bucket_what_nothing_names(s3, on_s3, trained, capsys):
    cli = Cli(capsys, on_s3.url)
    stray = b"an object another deployment left\n"
    stray_hex = hashlib.sha256(stray).hexdigest()
    s3.client().put_object(Bucket=BUCKET, Key=key(stray_hex), Body=stray)
    snapshots = cli.json("training", "runs", "snapshots", trained["run"]["runId"])["snapshots"]
    named = {a["manifestDigest"].removeprefix("sha256:") for s in snapshots for a in s["artifacts"]}
    named |= {item["digest"].removeprefix("sha256:")
              for item in cli.json("registry", "datasets", "get", f"{trained['name']}/chat")["objects"]}
    time.sleep(2.1)  # LastModified has whole seconds: the stray is older than the (zero) grace after two
    counted = cli.json("server", "gc", "--dry-run")
    assert counted["blobs"] >= 1 and in_bucket(s3, stray_hex)
    removed = cli.json("server", "gc")
    assert removed["blobs"] >= 1 and removed["unreadableManifests"] == []
    assert not in_bucket(s3, stray_hex)
    assert all(in_bucket(s3, sha) for sha in named)
    aside = s3.client().list_objects_v2(Bucket=BUCKET, Prefix=f"{PREFIX}/collecting/")
    assert aside.get("KeyCount", 0) == 0
    # what the collector kept still trains from: the model's files read back through the server
    listed = cli.json("registry", "models", "files", trained["run"]["results"]["model"])
    assert listed


@pytest.mark.parametrize(("url", "says"), [
    ("s3://Not_A_Bucket/x", "is not an s3://BUCKET[/PREFIX] URL"),
    ("s3://no-such-bucket/x", "the blob store's bucket 'no-such-bucket' does not exist"),
])
def test_a_bad_blob_store_refuses_the_start_in_one_line(s3, tmp_path, url, says):
    with pytest.raises(RuntimeError) as refused:
        start_server(tmp_path / "refused", extra_args=["--blob-store", url], env=s3.env)
    log = (tmp_path / "refused" / "server.log").read_text()
    assert says in log and "Traceback" not in log
    assert "exited with 1" in str(refused.value)


def test_an_unreachable_store_refuses_the_start(s3, tmp_path):
    env = {**s3.env, "AWS_ENDPOINT_URL": "http://127.0.0.1:9"}
    with pytest.raises(RuntimeError):
        start_server(tmp_path / "refused", extra_args=["--blob-store", f"s3://{BUCKET}"], env=env)
    log = (tmp_path / "refused" / "server.log").read_text()
    assert f"the blob store's bucket '{BUCKET}' cannot be reached" in log and "Traceback" not in log
