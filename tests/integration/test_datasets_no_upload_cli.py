"""`akka registry datasets register --no-upload`, against real servers: the file is read, checked and cut as a
registration would, and the command reports the version it would be and the objects the registry lacks, sending,
opening and registering nothing."""

from __future__ import annotations

import hashlib
import sqlite3

import httpx
import pytest

from optimize.core.digests import version_digest
from optimize.core.limits import DatasetLimits
from optimize.core.sharding import plan_shards
from optimize.core.sizes import human_size
from tests.conftest import Cli, chat_row, pair_row, write_jsonl

pytestmark = pytest.mark.integration

REPORT_KEYS = ["reference", "format", "digest", "existingVersion", "objects", "bytes", "held", "missing",
               "missingBytes", "conversion", "images", "missingImages"]


def many_rows(path, count: int, tag: str):
    """Rows no other test writes (`tag`): shards are held by their bytes whichever test sent them."""
    return write_jsonl(path, [chat_row(f"{tag} question {i} " + "x" * 200, f"answer {i}") for i in range(count)])


def stored_state(proc) -> dict[str, object]:
    """What a registration leaves behind on a SQLite server: its sessions, versions, shards, namespaces, and the
    blobs its store holds."""
    with sqlite3.connect(proc.data_dir / "optimize.db") as db:
        counts = {table: db.execute(f"select count(*) from {table}").fetchone()[0]  # noqa: S608 - our own names
                  for table in ("upload_sessions", "dataset_versions", "shards", "namespaces", "datasets")}
    blobs = sorted(p.name for p in (proc.data_dir / "blobs").rglob("*") if p.is_file())
    return {**counts, "blobs": blobs}


def test_no_upload_lists_what_is_missing_and_changes_nothing_then_reports_the_registered_version(
        sqlite_server, capsys, ns, tmp_path):
    cli = Cli(capsys, sqlite_server.url)
    path = many_rows(tmp_path / "d.jsonl", 300, ns)
    register = ["registry", "datasets", "register", f"{ns}/d", "-f", str(path), "--shard-size", "16KiB"]
    before = stored_state(sqlite_server)

    report = cli.json(*register, "--no-upload")
    assert list(report) == REPORT_KEYS
    shards = plan_shards(path, 16 * 1024, DatasetLimits())
    data = path.read_bytes()
    assert report["reference"] == f"{ns}/d" and report["format"] == "chat-jsonl-v1"
    assert report["digest"] == version_digest("chat-jsonl-v1", [(s.path, s.sha256, s.size) for s in shards])
    assert report["existingVersion"] is None and report["conversion"] is None
    assert report["objects"] == len(shards) > 1 and report["held"] == 0
    assert report["missing"] == [{"path": f"examples-{i:05d}.jsonl",
                                  "sha256": hashlib.sha256(data[s.offset:s.offset + s.size]).hexdigest(),
                                  "bytes": s.size} for i, s in enumerate(shards)]
    assert report["missingBytes"] == report["bytes"] == len(data)
    size = human_size(len(data))
    text = cli.ok(*register, "--no-upload")
    assert text.out.startswith(f"Not registered yet: registering the file adds a version to {ns}/d")
    assert f"Objects  {len(shards)} ({size}); the registry holds 0, lacks {len(shards)} ({size})" in text.out
    assert "examples-00000.jsonl" in text.out and shards[0].sha256 in text.out
    assert "Nothing was sent or registered (--no-upload)." in text.out
    # nothing was opened, stored or registered, and the namespace a registration would create is not there yet
    assert stored_state(sqlite_server) == before
    assert cli("registry", "datasets", "get", f"{ns}/d").code == 1
    assert cli("registry", "namespaces", "get", ns).code == 1

    version = cli.json(*register)
    assert version["digest"] == report["digest"] and version["upload"]["sent"] == len(shards)
    registered = stored_state(sqlite_server)

    again = cli.json(*register, "--no-upload")
    assert again == {**report, "existingVersion": "v1", "held": len(shards), "missing": [], "missingBytes": 0}
    text = cli.ok(*register, "--no-upload")
    assert text.out.startswith(f"Already registered: {ns}/d:v1 — registering the file returns it")
    assert f"Objects  {len(shards)} ({size}); the registry holds them all" in text.out and "LACKING" not in text.out
    # the same rows with more after them: the shards cut alike are held, only the new ones are missing
    longer = many_rows(tmp_path / "longer.jsonl", 400, ns)
    grown = cli.json("registry", "datasets", "register", f"{ns}/d", "-f", str(longer), "--shard-size", "16KiB",
                     "--no-upload")
    assert grown["existingVersion"] is None and grown["digest"] != report["digest"]
    assert 0 < grown["held"] < grown["objects"] and grown["held"] + len(grown["missing"]) == grown["objects"]
    held_paths = {s.path for s in shards[:-1]}  # the last shard of the shorter file ends where that file did
    assert held_paths.isdisjoint(item["path"] for item in grown["missing"])
    assert stored_state(sqlite_server) == registered


def test_no_upload_refuses_what_a_registration_refuses(cli, ns, tmp_path):
    bad = write_jsonl(tmp_path / "bad.jsonl", [chat_row(ns), {"messages": [{"role": "user", "content": "no answer"}]}])
    refused = cli("registry", "datasets", "register", f"{ns}/d", "-f", str(bad), "--no-upload")
    assert refused.code == 1
    assert "the file has 1 bad line(s); registering it would be refused" in refused.err
    assert "line 2: the last message must be an assistant message" in " ".join(refused.err.split())
    as_json = cli("registry", "datasets", "register", f"{ns}/d", "-f", str(bad), "--no-upload", "-o", "json")
    assert as_json.code == 1 and as_json.json["error"]["errorCount"] == 1

    chat = write_jsonl(tmp_path / "chat.jsonl", [chat_row(ns)])
    cli.ok("registry", "datasets", "register", f"{ns}/d", "-f", str(chat))
    pairs = write_jsonl(tmp_path / "pairs.jsonl", [pair_row(ns)])
    other_kind = cli("registry", "datasets", "register", f"{ns}/d", "-f", str(pairs), "--no-upload")
    assert other_kind.code == 1 and f"dataset {ns}/d holds chat conversations" in other_kind.err
    assert "register the file under another dataset name" in other_kind.err

    cli.ok("registry", "namespaces", "archive", ns)
    archived = cli("registry", "datasets", "register", f"{ns}/e", "-f", str(chat), "--no-upload")
    assert archived.code == 1 and f"namespace '{ns}' is archived" in archived.err
    assert f"akka registry namespaces unarchive {ns}" in archived.err

    limited = cli.json("auth", "tokens", "create", f"{ns}-limited", "--role", "trainer", "--namespace", "elsewhere")
    outside = cli("registry", "datasets", "register", f"{ns}x/d", "-f", str(chat), "--no-upload",
                  "--token", limited["token"])
    assert outside.code == 1 and "is outside them" in outside.err
    reader = cli.json("auth", "tokens", "create", f"{ns}-reader", "--role", "reader")
    read_only = cli("registry", "datasets", "register", f"{ns}x/d", "-f", str(chat), "--no-upload",
                    "--token", reader["token"])
    assert read_only.code == 1 and "needs the trainer role" in read_only.err


def test_no_upload_of_a_converted_file_reports_its_conversion(cli, ns, tmp_path):
    openai = write_jsonl(tmp_path / "openai.jsonl", [{
        "input": {"messages": [{"role": "user", "content": f"{ns}: weather?"}]},
        "preferred_output": [{"role": "assistant", "content": "Sunny"}],
        "non_preferred_output": [{"role": "assistant", "content": "No idea"}]}])
    report = cli.json("registry", "datasets", "register", f"{ns}/p", "-f", str(openai), "--no-upload")
    assert report["format"] == "preference-jsonl-v1" and report["conversion"]["sourceFormat"] == \
        "openai-preference-jsonl"
    assert [item["path"] for item in report["missing"]] == ["examples.jsonl"]
    version = cli.json("registry", "datasets", "register", f"{ns}/p", "-f", str(openai))
    assert version["digest"] == report["digest"] and version["conversion"] == report["conversion"]
    again = cli.json("registry", "datasets", "register", f"{ns}/p", "-f", str(openai), "--no-upload")
    assert again["existingVersion"] == "v1" and again["missing"] == []
    assert "From     openai-preference-jsonl rows in a jsonl file (1 row)" in \
        cli.ok("registry", "datasets", "register", f"{ns}/p", "-f", str(openai), "--no-upload").out


def test_the_preview_route_refuses_a_bad_body_in_its_fields_words(server, ns):
    url = f"{server.url}/v1/registry/dataset-uploads/preview"
    shard = {"index": 0, "path": "examples.jsonl", "sha256": "a" * 64, "bytes": 10, "lines": 1}
    body = {"dataset": f"{ns}/d", "format": "chat-jsonl-v1", "shards": [shard]}
    answer = httpx.post(url, headers=server.headers, json=body)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"dataset": f"{ns}/d", "format": "chat-jsonl-v1",
                             "digest": version_digest("chat-jsonl-v1", [("examples.jsonl", "a" * 64, 10)]),
                             "existingVersion": None, "shards": [{**shard, "held": False}]}
    for changed, words in (({"shards": [{**shard, "bytes": "10"}]}, "each {index, path, sha256, bytes, lines}"),
                           ({"shards": [{**shard, "sha256": "A" * 64}]}, "needs 'sha256' as 64 lowercase hex"),
                           ({"extra": 1}, "unknown field(s): extra"),
                           ({"format": "csv"}, "csv"),
                           ({"shards": [{**shard, "index": i, "path": f"examples-{i:05d}.jsonl"}
                                        for i in range(1001)]}, "a version holds at most 1000 shards")):
        refused = httpx.post(url, headers=server.headers, json={**body, **changed})
        assert 400 <= refused.status_code < 500 and words in refused.json()["detail"], (changed, refused.text)
    assert httpx.post(url, headers=server.headers, json=[]).json()["detail"] == \
        "the request body must be a JSON object: {dataset, format, shards}"
