"""Stored bytes are verified before use, on a real server with real evaluation workers: a byte flipped in the
worker cache is caught before the worker reads the rows (the copy is fetched again, and the answers compare with the
dataset's own text); a byte flipped in the blob store is caught before the blob route sends it (the copy is
quarantined, the job fails naming the object), and registering the same file again heals it."""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests.conftest import Cli, chat_row, from_standin, write_jsonl

pytestmark = [pytest.mark.fault, pytest.mark.integration]
LLAMA = "optimize/tiny-llama-3.2"


def _flip(path: Path, old: bytes, new: bytes) -> None:
    """Change bytes in place, keeping the size and putting the modification time back (as a bad disk or a careless
    copy would): only what no user call can set back (ctime) tells."""
    stat = path.stat()
    data = path.read_bytes()
    assert len(old) == len(new) and old in data
    with path.open("r+b") as handle:
        handle.seek(data.index(old))
        handle.write(new)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def _settled(client: httpx.Client, evaluation_id: str) -> dict:
    deadline = time.monotonic() + 240
    while (item := client.get(f"/v1/training/evaluations/{evaluation_id}").json())["phase"] in ("QUEUED", "RUNNING"):
        assert time.monotonic() < deadline, item
        time.sleep(0.2)
    return item


def _evaluate(client: httpx.Client, project: str) -> dict:
    started = client.post("/v1/training/evaluations", json={"model": LLAMA, "dataset": f"{project}/tickets",
                                                            "project": project, "maxNewTokens": 2})
    assert started.status_code == 202, started.text
    return _settled(client, started.json()["evaluationId"])


def _expected(client: httpx.Client, evaluation_id: str) -> set[str]:
    answer = client.get(f"/v1/training/evaluations/{evaluation_id}/predictions")
    assert answer.status_code == 200, answer.text
    return {p["expected"] for p in answer.json()["predictions"]}


def test_a_flipped_byte_in_the_worker_cache_or_the_blob_store_is_caught_before_use_and_healed(
        sqlite_server, capsys, tmp_path):
    server = sqlite_server
    client = httpx.Client(base_url=server.url, headers=server.headers, timeout=300)
    client.post(f"/v1/training/base-models/{LLAMA}/select", json=from_standin(LLAMA)).raise_for_status()
    tag = uuid.uuid4().hex[:10]
    project = f"integrity{tag}"
    client.post("/v1/training/projects", json={"name": project}).raise_for_status()
    label = f'{{"label": "billing-{tag}"}}'
    source = write_jsonl(tmp_path / "tickets.jsonl", [chat_row(f"Label ticket {tag} {i}", label) for i in range(2)])
    sha = hashlib.sha256(source.read_bytes()).hexdigest()  # one shard: the file itself
    cli = Cli(capsys, server.url)
    cli.ok("registry", "datasets", "register", f"{project}/tickets", "-f", str(source))
    cached = server.data_dir / "worker-cache" / "blobs" / "sha256" / sha[:2] / sha
    stored = server.data_dir / "blobs" / "sha256" / sha[:2] / sha[2:4] / sha

    first = _evaluate(client, project)
    assert first["phase"] == "COMPLETED", first
    assert cached.read_bytes() == source.read_bytes()

    # the worker cache: a flipped byte is caught before the rows are read, and the copy fetched again
    _flip(cached, b"billing", b"billinG")
    second = _evaluate(client, project)
    assert second["phase"] == "COMPLETED", second
    assert _expected(client, second["evaluationId"]) == {label}  # never the altered answer
    assert cached.read_bytes() == source.read_bytes()

    # the blob store: the route does not send a corrupt copy; it is quarantined and the job fails naming it
    _flip(stored, b"billing", b"billinG")
    cached.unlink()  # so the next worker must ask the server for the bytes
    third = _evaluate(client, project)
    assert third["phase"] == "FAILED", third
    assert f"sha256:{sha}" in third["failureReason"] and "corrupt" in third["failureReason"], third["failureReason"]
    assert not stored.exists()
    assert [p.read_bytes() for p in (server.data_dir / "blobs" / "quarantine").glob(f"{sha}.*")] == [
        source.read_bytes().replace(b"billing", b"billinG", 1)]
    assert f"blob sha256:{sha} is corrupt" in server.log.read_text()

    # registering the same file again sends the shard the registry no longer holds: the same version, healed
    again = cli.json("registry", "datasets", "register", f"{project}/tickets", "-f", str(source))
    assert again["created"] is False and again["upload"]["sent"] == 1, again
    assert stored.read_bytes() == source.read_bytes()
    retried = client.post(f"/v1/training/evaluations/{third['evaluationId']}/retry")
    assert retried.status_code == 202, retried.text
    healed = _settled(client, third["evaluationId"])
    assert healed["phase"] == "COMPLETED", healed
    assert _expected(client, third["evaluationId"]) == {label}
