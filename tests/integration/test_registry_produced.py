"""Rows a job produced, registered as a dataset version with lineage (`registry/produced.py`), on SQLite and on
PostgreSQL: the same checks and storage as an upload, the same rows the same version, lineage readable wherever
the version is read; and through a real server, the CLI's `get` showing it."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from optimize.blobs.local import LocalBlobStore
from optimize.core.digests import version_digest
from optimize.core.errors import Invalid, Refused
from optimize.core.limits import DatasetLimits
from optimize.core.sharding import plan_shards
from optimize.registry import datasets
from optimize.registry.namespaces import set_archived
from optimize.registry.produced import register_rows
from optimize.registry.uploads import Registry, commit_upload, create_upload, receive_shard
from optimize.store.db import Store
from optimize.store.tables import DatasetVersion, UploadSession
from tests.conftest import Cli, chat_row, migrated_store, pair_row
from tests.row_cases import TOOLS

LINEAGE = {
    "producedBy": {"kind": "distillation", "id": "1a2b3c4d5e6f"},
    "teacher": {"reference": "optimize/tiny-llama-3.2", "commit": "0123456789abcdef0123456789abcdef01234567"},
    "source": {"reference": "demo/src:v1", "digest": "sha256:" + "ab" * 32},
}
ROWS = [chat_row("What is the capital of France?", "Paris."), chat_row("2 + 2?", "4", tools=TOOLS),
        chat_row("Say hello in Japanese", "こんにちは")]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def registry(request, tmp_path):
    store = migrated_store(request.param, tmp_path)
    yield Registry(store, LocalBlobStore(tmp_path / "blobs"), DatasetLimits())
    store.dispose()


def shown(answer) -> dict:
    """An answer as the API writes it."""
    return answer.model_dump(mode="json", by_alias=True)


def produce(registry: Registry, target: str, rows: list[dict], lineage: dict, alias: str | None = None) -> dict:
    """The rows registered, as one object: the version as a commit answers it, the rows and how the upload went."""
    produced = register_rows(registry, target, rows, lineage, alias=alias)
    return {**shown(produced.version), "rows": produced.rows,
            "upload": {"sent": produced.sent, "alreadyHeld": produced.already_held}}


def read(registry: Registry, reference: str, selector: str = "latest") -> dict:
    namespace, name = reference.split("/")
    return shown(datasets.read_version(registry.store, namespace, name, selector, registry.blobs.location))


def versions(registry: Registry, reference: str) -> list[dict]:
    namespace, name = reference.split("/")
    return [shown(item) for item in datasets.list_versions(registry.store, namespace, name)]


def described(registry: Registry, reference: str, number: int) -> dict:
    """The version as a commit answers it."""
    namespace, name = reference.split("/")
    with registry.store.transaction() as session:
        dataset = datasets.get_dataset(session, namespace, name)
        version = datasets.resolve_version(session, dataset, f"v{number}")
        return shown(datasets.describe_committed(session, dataset, version, registry.blobs.location, created=False))


def test_rows_become_version_1_with_their_lineage(registry, ns):
    target = f"{ns}/distilled"
    version = produce(registry, target, ROWS, LINEAGE)
    assert version["reference"] == f"{target}:v1" and version["version"] == 1
    assert version["digest"].startswith("sha256:") and version["rows"] == 3 == version["examples"]
    assert version["created"] is True and version["format"] == "chat-jsonl-v1" and version["toolRows"] == 1
    assert version["lineage"] == LINEAGE
    assert version["upload"]["sent"] == 1 and version["upload"]["alreadyHeld"] == 0
    assert described(registry, target, 1)["lineage"] == LINEAGE
    detail = read(registry, target, "v1")
    assert detail["lineage"] == LINEAGE and detail["versionCount"] == 1 and detail["aliases"] == ["latest"]
    assert [item["lineage"] for item in versions(registry, target)] == [LINEAGE]
    listed = datasets.list_datasets(registry.store, ns, include_archived=False)
    assert listed[0].latest.lineage == LINEAGE
    # Stored as an upload stores: a content-addressed shard in the blob store, the session committed.
    (shard,) = detail["objects"]
    assert registry.blobs.holds(shard["digest"].removeprefix("sha256:"))
    with registry.store.transaction() as session:
        (upload,) = session.query(UploadSession).filter_by(namespace=ns).all()
        assert upload.phase == "committed"


def test_the_digest_is_the_one_the_same_jsonl_file_registers_as(registry, ns, tmp_path):
    """One row a line as json.dumps(ensure_ascii=False) writes it: the file `register -f` would send."""
    version = produce(registry, f"{ns}/distilled", ROWS, LINEAGE)
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in ROWS), encoding="utf-8")
    shards = plan_shards(path, None, registry.limits)
    from optimize.chat.formats import DatasetFormat

    assert version["digest"] == version_digest(DatasetFormat.CHAT, [(s.path, s.sha256, s.size) for s in shards])


def test_the_same_rows_again_are_the_same_version_and_keep_its_lineage(registry, ns):
    target = f"{ns}/distilled"
    first = produce(registry, target, ROWS, LINEAGE)
    other = {"producedBy": {"kind": "distillation", "id": "ffffffffffff"}}
    again = produce(registry, target, [dict(row) for row in ROWS], other, alias="kept")
    assert again["created"] is False
    assert (again["reference"], again["version"], again["digest"]) == (first["reference"], 1, first["digest"])
    assert again["lineage"] == LINEAGE and again["upload"]["sent"] == 0 and again["upload"]["alreadyHeld"] == 1
    assert read(registry, target)["lineage"] == LINEAGE
    assert read(registry, target, "kept")["version"] == 1  # the alias moved all the same
    assert len(versions(registry, target)) == 1


def test_different_rows_are_version_2(registry, ns):
    target = f"{ns}/distilled"
    register_rows(registry, target, ROWS, LINEAGE)
    second_lineage = {**LINEAGE, "producedBy": {"kind": "distillation", "id": "0f0f0f0f0f0f"}}
    second = produce(registry, target, [*ROWS, chat_row("One more?", "Yes.")], second_lineage, alias="train")
    assert second["created"] is True and second["version"] == 2 and second["reference"] == f"{target}:v2"
    assert second["rows"] == 4 and second["lineage"] == second_lineage
    assert set(second["aliases"]) == {"latest", "train"}
    assert [item["lineage"] for item in versions(registry, target)] == [second_lineage, LINEAGE]
    assert read(registry, target, "v1")["lineage"] == LINEAGE


def test_preference_pairs_are_detected_and_registered(registry, ns):
    version = produce(registry, f"{ns}/pairs", [pair_row(), pair_row("hey", "fine", "worse")], LINEAGE)
    assert version["format"] == "preference-jsonl-v1" and version["pairs"] == 2 and version["rows"] == 2
    with pytest.raises(Refused, match="holds preference pairs"):
        register_rows(registry, f"{ns}/pairs", ROWS, LINEAGE)


def test_a_bad_row_is_refused_by_its_line_and_nothing_is_registered(registry, ns):
    bad = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                        {"role": "user", "content": "and then?"}]}
    target = f"{ns}/distilled"
    with pytest.raises(Invalid) as refused:
        register_rows(registry, target, [ROWS[0], bad], LINEAGE)
    assert "line 2" in refused.value.message
    assert refused.value.details["errorCount"] == 1
    (error,) = refused.value.details["errors"]
    assert error["line"] == 2 and "the last message must be an assistant message" in error["reason"]
    with registry.store.transaction() as session:
        assert datasets.find_dataset(session, ns, "distilled") is None
        assert session.query(DatasetVersion).count() == 0
        assert {u.phase for u in session.query(UploadSession).filter_by(namespace=ns)} == {"refused"}
    # Into a dataset that has a version: it keeps only that one.
    register_rows(registry, target, ROWS, LINEAGE)
    with pytest.raises(Invalid, match="line 3"):
        register_rows(registry, target, [*ROWS[:2], bad], LINEAGE)
    assert [item["version"] for item in versions(registry, target)] == [1]
    assert read(registry, target)["versionCount"] == 1


def test_rows_that_are_not_rows_are_refused(registry, ns):
    with pytest.raises(Invalid, match="no rows"):
        register_rows(registry, f"{ns}/distilled", [], LINEAGE)
    with pytest.raises(Invalid, match="line 2"):
        register_rows(registry, f"{ns}/distilled", [ROWS[0], {"messages": {1, 2}}], LINEAGE)
    with pytest.raises(Invalid, match="without a version or alias"):
        register_rows(registry, f"{ns}/distilled:v1", ROWS, LINEAGE)
    with registry.store.transaction() as session:
        assert datasets.find_dataset(session, ns, "distilled") is None


def test_an_archived_namespace_refuses_the_rows_as_it_refuses_an_upload(registry, ns):
    register_rows(registry, f"{ns}/distilled", ROWS, LINEAGE)
    set_archived(registry.store, ns, True)
    with pytest.raises(Refused) as refused:
        register_rows(registry, f"{ns}/distilled", [chat_row("new", "rows")], LINEAGE)
    assert refused.value.message == f"namespace '{ns}' is archived; it takes no new versions"
    assert "unarchive" in refused.value.hint
    with pytest.raises(Refused) as uploaded:  # the same refusal an upload session gets
        create_upload(registry, {"dataset": f"{ns}/distilled", "format": "chat-jsonl-v1",
                                 "shards": [{"index": 0, "path": "examples.jsonl", "sha256": "0" * 64, "bytes": 10,
                                             "lines": 1}]})
    assert uploaded.value.message == refused.value.message
    assert [item["version"] for item in versions(registry, f"{ns}/distilled")] == [1]


def test_an_uploaded_version_has_no_lineage(registry, ns, tmp_path):
    path = tmp_path / "upload.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    (shard,) = plan_shards(path, None, registry.limits)
    session = create_upload(registry, {"dataset": f"{ns}/uploaded", "format": "chat-jsonl-v1",
                                       "shards": [shard.to_json()]})
    receive_shard(registry, session.upload_id, 0, [path.read_bytes()])
    committed = commit_upload(registry, session.upload_id, None)
    assert committed.created is True and committed.lineage is None
    assert read(registry, f"{ns}/uploaded")["lineage"] is None


def test_the_cli_shows_the_lineage_through_a_server(sqlite_server, capsys, ns):
    """Rows registered into a running server's store (as its job would) read back over HTTP and by the CLI."""
    store = Store(f"sqlite:///{sqlite_server.data_dir / 'optimize.db'}")
    try:
        registry = Registry(store, LocalBlobStore(Path(sqlite_server.data_dir) / "blobs"), DatasetLimits())
        register_rows(registry, f"{ns}/distilled", ROWS, LINEAGE)
    finally:
        store.dispose()
    cli = Cli(capsys, sqlite_server.url)
    text = cli.ok("registry", "datasets", "get", f"{ns}/distilled").out
    assert ("Lineage   distillation 1a2b3c4d5e6f: teacher optimize/tiny-llama-3.2 (commit 0123456789ab), "
            "from demo/src:v1") in text
    assert cli.json("registry", "datasets", "get", f"{ns}/distilled")["lineage"] == LINEAGE
    answer = httpx.get(f"{sqlite_server.url}/v1/registry/datasets/{ns}/distilled/versions/v1",
                       headers=sqlite_server.headers)
    assert answer.status_code == 200 and answer.json()["lineage"] == LINEAGE
    listed = cli.json("registry", "datasets", "versions", f"{ns}/distilled")
    assert listed["versions"][0]["lineage"] == LINEAGE
