"""Base models and capacity through `akka training`: list, get, select (stand-in, import, offline refusal)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import Cli, start_server

pytestmark = pytest.mark.integration


@pytest.fixture
def cli_sqlite(capsys, sqlite_server):
    return Cli(capsys, sqlite_server.url)


def test_list_and_get_through_cli_and_api(cli_sqlite):
    listed = cli_sqlite.json("training", "base-models", "list")
    assert listed["envelopes"] == "advisory"
    ids = {m["id"]: m for m in listed["models"]}
    assert ids["google/gemma-4-26b-a4b-it"]["servingOnly"] is True
    text = cli_sqlite.ok("training", "base-models", "get", "google/gemma-4-26B-A4B-it").out
    assert "Allowed for  serving only (served on h200)" in text
    assert "26.0B total, 4.0B active" in text
    tiny = cli_sqlite.ok("training", "base-models", "get", "optimize/tiny-smollm2").out
    assert "Measured training envelopes (measurements):" in tiny and "benchmarks/envelopes_cpu.py" in tiny
    missing = cli_sqlite("training", "base-models", "get", "gpt-9")
    assert missing.code == 1 and "no base model 'gpt-9' in the catalog" in missing.err


def test_capacity_lists_the_cpu_pool(cli_sqlite):
    capacity = cli_sqlite.json("training", "capacity")
    cpu = [p for p in capacity["pools"] if p["profile"] == "cpu"]
    assert cpu and cpu[0]["declared"] == cpu[0]["free"] >= 1
    assert capacity["claims"] == []
    assert "Pools" in cli_sqlite.ok("training", "capacity").out


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """A server of this module's own, on which nothing is selected but what its tests select (each a model of its
    own): for selections that build a stand-in, which the session's servers may hold already."""
    proc = start_server(tmp_path_factory.mktemp("fresh"))
    yield proc
    proc.stop()


def test_stand_in_selected_on_two_servers_has_the_same_commit(fresh, server_factory, capsys, tmp_path):
    commits = []
    for proc in (fresh, server_factory("b")):
        selected = Cli(capsys, proc.url).json("training", "base-models", "select", "optimize/tiny-qwen2.5")
        assert selected["status"] == "ready" and selected["selection"]["source"] == "stand-in"
        assert Path(selected["selection"]["path"]).is_relative_to(proc.data_dir)
        commits.append(selected["commit"])
        assert Cli(capsys, proc.url).json("training", "base-models", "get", "tiny-qwen2.5")["commit"] == commits[-1]
    assert commits[0] == commits[1] and len(commits[0]) == 64


def test_import_from_a_local_snapshot(fresh, capsys, tmp_path):
    cli = Cli(capsys, fresh.url)
    built = cli.json("training", "base-models", "select", "optimize/tiny-smollm2")
    snapshot = tmp_path / "snapshot"
    shutil.copytree(built["selection"]["path"], snapshot)
    imported = cli.json("training", "base-models", "select", "optimize/tiny-smollm2", "--from", str(snapshot))
    assert imported["selection"]["source"] == "import"
    assert imported["selection"]["contentDigest"] == "sha256:" + built["commit"]


def test_snapshot_without_safetensors_is_refused(cli_sqlite, tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "tokenizer.json").write_text("{}")
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80")
    result = cli_sqlite("training", "base-models", "select", "qwen/qwen2.5-0.5b-instruct", "--from", str(tmp_path))
    assert result.code == 1 and "holds no safetensors weights" in result.err and "pytorch_model.bin" in result.err
    assert cli_sqlite.json("training", "base-models", "get", "qwen/qwen2.5-0.5b-instruct")["status"] == "not-selected"


def test_offline_server_refuses_to_fetch(cli_sqlite):
    pinned = cli_sqlite("training", "base-models", "select", "google/gemma-4-e2b-it")
    assert pinned.code == 1 and "offline (HF_HUB_OFFLINE=1)" in pinned.err and "--from DIR" in pinned.err
    unpinned = cli_sqlite("training", "base-models", "select", "meta-llama/llama-3.2-1b-instruct")
    assert unpinned.code == 1 and "offline (HF_HUB_OFFLINE=1)" in unpinned.err  # unpinned: resolved online only


def test_applied_catalog_from_a_file(server_factory, capsys, tmp_path):
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(
        "trainer:\n  base-model-catalog:\n    strict-envelopes: true\n"
        "devices:\n  - {name: cpu, kind: cpu, devices: 2}\n"
        "models:\n  - {id: optimize/tiny-qwen2.5, repository: optimize/tiny-qwen2.5, commit: null, family: qwen2.5,"
        " architecture: {}, parameters: {total: 1, active: 1}, contextLength: 64, allowedFor: [training, serving],"
        " standIn: {family: qwen2.5}}\n")
    proc = server_factory("custom", extra_args=["--catalog", str(catalog)])
    cli = Cli(capsys, proc.url)
    listed = cli.json("training", "base-models", "list")
    assert listed["envelopes"] == "strict" and [m["id"] for m in listed["models"]] == ["optimize/tiny-qwen2.5"]
    assert cli.json("training", "capacity")["pools"][-1]["declared"] == 2


def test_bad_catalog_is_refused_at_start(tmp_path):
    import subprocess
    import sys

    catalog = tmp_path / "catalog.yaml"
    catalog.write_text("models:\n  - {id: a/b}\n")
    done = subprocess.run([sys.executable, "-m", "optimize", "server", "start", "--port", "0", "--data-dir",
                           str(tmp_path / "d"), "--catalog", str(catalog)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "is not valid" in done.stderr and "models.0.repository" in done.stderr
