"""Prepared token rows through `akka registry datasets` against real servers (SQLite, PostgreSQL): Parquet files of
`input_ids` and `loss_mask` described by `describe-prepared`, registered from their folder or a ZIP of it (the
version records the descriptor and its longest row; the same files again are the same version, a second version
sends only its new file), and every rule refused by file and row — by the CLI before anything is sent, and by the
registry itself for a file sent to it directly."""

from __future__ import annotations

import hashlib
import json
import shutil
import zipfile
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import Cli

pytestmark = pytest.mark.integration

REVISION = "a" * 40
TEMPLATE = "b" * 64


def write_rows(path: Path, rows: list[tuple[list[int], list[int]]], **columns) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    table = {"input_ids": [ids for ids, _ in rows], "loss_mask": [mask for _, mask in rows], **columns}
    pq.write_table(pa.table(table), path)
    return path


GOOD = [([1, 5, 6, 7], [0, 0, 1, 1]), ([1, 8, 9], [0, 1, 1]), ([1, 2, 3, 4, 5, 6], [0, 0, 0, 1, 1, 1])]


def folder_of(tmp: Path, files: dict[str, list]) -> Path:
    folder = tmp / "prepared"
    shutil.rmtree(folder, ignore_errors=True)
    for name, rows in files.items():
        write_rows(folder / name, rows)
    return folder


def describe(cli: Cli, folder: Path) -> dict:
    return cli.json("registry", "datasets", "describe-prepared", str(folder), "--tokenizer", "optimize/tiny-llama-3.2",
                    "--revision", REVISION, "--chat-template-sha256", TEMPLATE)


def test_prepared_rows_register_from_a_folder_or_a_zip_and_record_their_longest_row(cli, ns, tmp_path):
    folder = folder_of(tmp_path, {"data/part-0.parquet": GOOD[:2], "data/part-1.parquet": GOOD[2:]})
    described = describe(cli, folder)
    assert described["descriptor"]["files"] == ["data/part-0.parquet", "data/part-1.parquet"]
    assert described["rows"] == 3 and described["longestRow"] == 6
    version = cli.json("registry", "datasets", "register", f"{ns}/prep", "-f", str(folder))
    assert version["format"] == "prepared-tokens-v1" and version["examples"] == 3 and version["shards"] == 2
    assert version["prepared"]["longestRow"] == 6
    assert version["prepared"]["tokenizer"] == {"repository": "optimize/tiny-llama-3.2", "revision": REVISION}
    assert version["prepared"]["chatTemplateSha256"] == TEMPLATE and version["upload"]["sent"] == 2
    shown = cli.ok("registry", "datasets", "get", f"{ns}/prep").out
    assert "3 prepared rows, the longest 6 tokens" in shown and "Tokenizer optimize/tiny-llama-3.2 at aaaaaaaaaaaa" \
        in shown

    archive = tmp_path / "prepared.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        for file in sorted(folder.rglob("*")):
            if file.is_file():
                zipped.write(file, file.relative_to(folder).as_posix())
    again = cli.json("registry", "datasets", "register", f"{ns}/prep", "-f", str(archive))
    assert again["version"] == 1 and again["created"] is False and again["upload"]["sent"] == 0

    write_rows(folder / "data/part-2.parquet", GOOD[:1])
    describe_again = cli("registry", "datasets", "describe-prepared", str(folder), "--tokenizer", "t/t",
                         "--revision", REVISION, "--chat-template-sha256", TEMPLATE)
    assert describe_again.code == 1 and "exists" in describe_again.err  # never replaced unasked
    cli.ok("registry", "datasets", "describe-prepared", str(folder), "--tokenizer", "optimize/tiny-llama-3.2",
           "--revision", REVISION, "--chat-template-sha256", TEMPLATE, "--force")
    second = cli.json("registry", "datasets", "register", f"{ns}/prep", "-f", str(folder))
    assert second["version"] == 2 and second["upload"]["sent"] == 1 and second["upload"]["alreadyHeld"] == 2


@pytest.mark.parametrize("rows, words", [
    ([([1, 2, 3], [0, 1])], "row 1: input_ids holds 3 tokens and loss_mask 2"),
    ([([1, 2], [1, 1])], "row 1: loss_mask marks the first token"),
    ([([1, 2], [0, 0])], "row 1: loss_mask marks no token"),
    ([([1, -2], [0, 1])], "row 1: input_ids holds a missing or negative token id"),
    ([([1, 2], [0, 2])], "row 1: loss_mask holds a value other than 0 and 1"),
])
def test_each_rule_is_refused_by_file_and_row_before_anything_is_sent(cli, ns, tmp_path, rows, words):
    folder = folder_of(tmp_path, {"a.parquet": GOOD, "b.parquet": GOOD[:1] + rows})
    (folder / "prepared.json").write_text(json.dumps({
        "tokenizer": {"repository": "optimize/tiny-llama-3.2", "revision": REVISION},
        "chatTemplateSha256": TEMPLATE, "files": ["a.parquet", "b.parquet"]}))
    refused = cli("registry", "datasets", "register", f"{ns}/bad", "-f", str(folder))
    assert refused.code == 1 and f"b.parquet {words.replace('row 1', 'row 2')}" in refused.err, refused.err
    assert cli("registry", "datasets", "get", f"{ns}/bad").code == 1  # nothing registered


@pytest.mark.parametrize("descriptor, words", [
    ({"tokenizer": {"repository": "r", "revision": "main"}, "chatTemplateSha256": TEMPLATE, "files": ["a.parquet"]},
     "prepared.json: tokenizer.revision must be the tokenizer's commit (40 or 64 hex digits), not 'main'"),
    ({"tokenizer": {"repository": "r", "revision": REVISION}, "files": ["a.parquet"]},
     "prepared.json: chatTemplateSha256 must be the sha256"),
    ({"tokenizer": {"repository": "r", "revision": REVISION}, "chatTemplateSha256": TEMPLATE,
      "files": ["../a.parquet"]}, "which is not a plain path inside the dataset's folder"),
    ({"tokenizer": {"repository": "r", "revision": REVISION}, "chatTemplateSha256": TEMPLATE,
      "files": ["a.parquet", "missing.parquet"]}, "prepared.json lists missing.parquet, which is not in"),
])
def test_a_descriptor_that_cannot_be_read_is_refused_naming_its_field(cli, ns, tmp_path, descriptor, words):
    folder = folder_of(tmp_path, {"a.parquet": GOOD})
    (folder / "prepared.json").write_text(json.dumps(descriptor))
    refused = cli("registry", "datasets", "register", f"{ns}/bad", "-f", str(folder))
    assert refused.code == 1 and words in refused.err, refused.err


def test_the_registry_itself_refuses_a_bad_file_sent_to_it_by_file_and_row(server, ns, tmp_path):
    """The CLI's checks are a courtesy: a file sent straight to the upload route is checked by the registry."""
    client = httpx.Client(base_url=server.url, headers=server.headers, timeout=60)
    bad = write_rows(tmp_path / "bad.parquet", GOOD[:2] + [([1, 2], [1, 1])])
    data = bad.read_bytes()
    shard = {"index": 0, "path": "bad.parquet", "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
             "lines": 3}
    descriptor = {"tokenizer": {"repository": "r", "revision": REVISION}, "chatTemplateSha256": TEMPLATE,
                  "files": ["bad.parquet"]}
    session = client.post("/v1/registry/dataset-uploads", json={"dataset": f"{ns}/direct",
                                                                "format": "prepared-tokens-v1", "shards": [shard],
                                                                "prepared": descriptor})
    assert session.status_code in (200, 201), session.text
    sent = client.put(f"/v1/registry/dataset-uploads/{session.json()['uploadId']}/shards/0", content=data)
    assert sent.status_code == 422, sent.text
    assert sent.json()["errors"] == [{"file": "bad.parquet", "row": 3, "reason": "loss_mask marks the first token, "
                                                                                 "which has nothing before it to be "
                                                                                 "predicted from"}]
    without = client.post("/v1/registry/dataset-uploads", json={"dataset": f"{ns}/direct",
                                                                "format": "prepared-tokens-v1", "shards": [shard]})
    assert without.status_code == 422 and "needs prepared" in without.text
