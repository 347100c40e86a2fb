"""P7: a server killed while a shard streams loses nothing acknowledged; the same command resumes the upload.

Shards committed before the kill stay held; the shard being streamed is not; the registered version has the
digest the client computed.
"""

from __future__ import annotations

import hashlib
import threading
import time

import httpx
import pytest

from optimize.core.digests import version_digest
from optimize.core.limits import DatasetLimits
from optimize.core.sharding import plan_shards
from tests.conftest import Cli, chat_row, start_server, write_jsonl

pytestmark = [pytest.mark.fault, pytest.mark.integration]


def test_server_killed_mid_shard_then_same_command_resumes(tmp_path, capsys):
    data_dir = tmp_path / "server"
    proc = start_server(data_dir)
    path = write_jsonl(tmp_path / "d.jsonl", [chat_row(f"q{i} " + "z" * 400) for i in range(2000)])
    shards = plan_shards(path, 128 * 1024, DatasetLimits())
    assert len(shards) >= 6
    session = httpx.post(f"{proc.url}/v1/registry/dataset-uploads", headers=proc.headers, json={
        "dataset": "fault/d", "format": "chat-jsonl-v1", "shards": [s.to_json() for s in shards]}).json()
    data = path.read_bytes()
    for shard in shards[:3]:
        response = httpx.put(f"{proc.url}/v1/registry/dataset-uploads/{session['uploadId']}/shards/{shard.index}",
                             headers=proc.headers, content=data[shard.offset:shard.offset + shard.size])
        assert response.status_code == 201

    # Stream shard 3 slowly and kill the server halfway through it.
    fourth = shards[3]
    piece = data[fourth.offset:fourth.offset + fourth.size]

    def slow_body():
        for start in range(0, len(piece), 4096):
            yield piece[start:start + 4096]
            time.sleep(0.01)

    def send():
        try:
            httpx.put(f"{proc.url}/v1/registry/dataset-uploads/{session['uploadId']}/shards/3",
                      content=slow_body(), headers={**proc.headers, "Content-Length": str(len(piece))}, timeout=30)
        except httpx.HTTPError:
            pass

    sender = threading.Thread(target=send)
    sender.start()
    time.sleep(0.15)
    proc.kill9()
    sender.join(30)

    restarted = start_server(data_dir)
    try:
        assert list((data_dir / "blobs" / "staging").iterdir()) == []  # the partial shard was cleared
        state = httpx.post(f"{restarted.url}/v1/registry/dataset-uploads", headers=restarted.headers, json={
            "dataset": "fault/d", "format": "chat-jsonl-v1", "shards": [s.to_json() for s in shards]}).json()
        assert state["uploadId"] == session["uploadId"]
        assert [s["held"] for s in state["shards"][:4]] == [True, True, True, False]
        version = Cli(capsys, restarted.url).json(
            "registry", "datasets", "register", "fault/d", "-f", str(path), "--shard-size", "128KiB")
        assert version["upload"]["alreadyHeld"] == 3
        assert version["upload"]["sent"] == len(shards) - 3
        expected = version_digest("chat-jsonl-v1", [(s.path, s.sha256, s.size) for s in shards])
        assert version["digest"] == expected
        for obj, shard in zip(version["objects"], shards, strict=True):
            stored = (data_dir / "blobs" / "sha256" / shard.sha256[:2] / shard.sha256[2:4] / shard.sha256).read_bytes()
            assert hashlib.sha256(stored).hexdigest() == shard.sha256 == obj["digest"].removeprefix("sha256:")
    finally:
        restarted.stop()
