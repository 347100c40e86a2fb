"""Sharded versions, resumable uploads, limits refused before sending, and the same digest everywhere."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest

from optimize.core.sizes import human_size
from tests.conftest import Cli, chat_row, write_jsonl

pytestmark = pytest.mark.integration


def many_rows(path, count: int, width: int = 200):
    return write_jsonl(path, [chat_row(f"question {i} " + "x" * width, f"answer {i}") for i in range(count)])


def test_shard_size_cuts_a_small_file_into_ordered_shards(cli, ns, tmp_path):
    path = many_rows(tmp_path / "d.jsonl", 400)
    version = cli.json("registry", "datasets", "register", f"{ns}/d", "-f", str(path), "--shard-size", "32KiB")
    objects = version["objects"]
    assert version["shards"] == len(objects) > 1
    assert [o["path"] for o in objects] == [f"examples-{i:05d}.jsonl" for i in range(len(objects))]
    assert all(o["bytes"] <= 32 * 1024 for o in objects)
    assert sum(o["rows"] for o in objects) == version["examples"] == 400
    assert sum(o["bytes"] for o in objects) == version["bytes"] == path.stat().st_size
    assert version["upload"]["sent"] == len(objects)
    # not a terminal: a plain line a shard sent on stderr (JSON modes print only their answer)
    other = many_rows(tmp_path / "e.jsonl", 200, width=201)
    text = cli.ok("registry", "datasets", "register", f"{ns}/e", "-f", str(other), "--shard-size", "32KiB")
    sent = cli.json("registry", "datasets", "get", f"{ns}/e")["objects"]
    assert text.err.splitlines() == [f"  sent shard {i} of {len(sent)} ({human_size(o['bytes'])})"
                                     for i, o in enumerate(sent, start=1)]


def test_sharded_bad_rows_are_numbered_in_the_whole_file(cli, ns, tmp_path):
    rows = [chat_row(f"q{i} " + "y" * 300) for i in range(300)]
    rows[250] = {"messages": [{"role": "user", "content": "no answer"}]}
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    result = cli("registry", "datasets", "register", f"{ns}/d", "-f", str(path), "--shard-size", "16KiB")
    assert result.code == 1
    assert "line 251: the last message must be an assistant message" in " ".join(result.err.split())


def test_same_file_registers_as_same_digest_on_two_servers(sqlite_store_server, sqlite_server, capsys, ns,
                                                           tmp_path):
    """Two servers of the session, each with a store and blobs of its own (the name is new to both; rows of a width
    no other test sends, so that no shard is held already by either)."""
    path = many_rows(tmp_path / "d.jsonl", 300, width=197)
    digests = []
    for proc in (sqlite_store_server, sqlite_server):
        cli = Cli(capsys, proc.url)
        for shard_size in ("16KiB", None):
            args = ["registry", "datasets", "register", f"{ns}/data", "-f", str(path)]
            if shard_size:
                args += ["--shard-size", shard_size]
            digests.append(cli.json(*args)["digest"])
    assert digests[0] == digests[2] and digests[1] == digests[3]
    assert digests[0] != digests[1]  # a different cut is a different version


def test_interrupted_upload_sends_only_missing_shards(sqlite_server, capsys, ns, tmp_path):
    path = many_rows(tmp_path / "d.jsonl", 500)
    command = [sys.executable, "-m", "optimize", "registry", "datasets", "register", f"{ns}/d", "-f", str(path),
               "--shard-size", "16KiB", "--server", sqlite_server.url, "-o", "json"]
    crashed = subprocess.run(command, env={**os.environ, "OPTIMIZE_CRASH_AT": "client.upload.after_shard:3"},
                             capture_output=True, text=True, timeout=120)
    assert crashed.returncode == -9
    cli = Cli(capsys, sqlite_server.url)
    assert cli("registry", "datasets", "get", f"{ns}/d").code == 1  # nothing registered yet
    version = cli.json("registry", "datasets", "register", f"{ns}/d", "-f", str(path), "--shard-size", "16KiB")
    upload = version["upload"]
    assert upload["alreadyHeld"] == 3
    assert upload["sent"] == upload["shards"] - 3
    assert version["examples"] == 500


def test_registry_info_reports_limits(cli):
    info = cli.json("registry", "info")["datasets"]
    assert info["maxShardBytes"] == 256 * 1024 * 1024
    assert info["maxShards"] == 1000
    assert info["uploadExpirySeconds"] == 7 * 24 * 3600
    assert "maxLineBytes" in info


@pytest.fixture
def small_limits_server(server_factory):
    return server_factory("small", env={"OPTIMIZE_MAX_SHARD_BYTES": str(64 * 1024), "OPTIMIZE_MAX_SHARDS": "4"})


def _upload_sessions(proc) -> int:
    import sqlite3

    with sqlite3.connect(proc.data_dir / "optimize.db") as db:
        return db.execute("select count(*) from upload_sessions").fetchone()[0]


def test_file_over_shard_limits_refused_before_sending(small_limits_server, capsys, tmp_path):
    cli = Cli(capsys, small_limits_server.url)
    path = many_rows(tmp_path / "d.jsonl", 600)  # about 150 KiB
    too_small = cli("registry", "datasets", "register", "lim/d", "-f", str(path), "--shard-size", "16KiB")
    assert too_small.code == 1
    assert "makes more than 4 shards" in too_small.err and "pass --shard-size 1MiB" not in too_small.err
    assert "--shard-size" in too_small.err
    too_big = cli("registry", "datasets", "register", "lim/d", "-f", str(path), "--shard-size", "1MiB")
    assert too_big.code == 1 and "larger than the registry's shard limit 64KiB" in too_big.err
    assert _upload_sessions(small_limits_server) == 0
    huge = many_rows(tmp_path / "huge.jsonl", 1200)
    refused = cli("registry", "datasets", "register", "lim/d", "-f", str(huge))
    assert refused.code == 1 and "more than the registry holds in one version" in refused.err
    assert _upload_sessions(small_limits_server) == 0
    fits = cli.json("registry", "datasets", "register", "lim/d", "-f", str(path))
    assert fits["shards"] == 3


def test_expired_upload_is_refused_and_the_command_starts_again(server_factory, capsys, tmp_path):
    proc = server_factory("expiry", env={"OPTIMIZE_UPLOAD_EXPIRY_SECONDS": "1"})
    path = many_rows(tmp_path / "d.jsonl", 50)
    from optimize.core.limits import DatasetLimits
    from optimize.core.sharding import plan_shards

    shards = plan_shards(path, None, DatasetLimits())
    session = httpx.post(f"{proc.url}/v1/registry/dataset-uploads", headers=proc.headers,
                         json={"dataset": "exp/d", "format": "chat-jsonl-v1",
                               "shards": [s.to_json() for s in shards]}).json()
    import time

    time.sleep(1.5)
    late = httpx.put(f"{proc.url}/v1/registry/dataset-uploads/{session['uploadId']}/shards/0", headers=proc.headers,
                     content=path.read_bytes())
    assert late.status_code == 410 and "expired" in late.json()["detail"]
    assert "run the same register command again" in late.json()["hint"]
    version = Cli(capsys, proc.url).json("registry", "datasets", "register", "exp/d", "-f", str(path))
    assert version["examples"] == 50
