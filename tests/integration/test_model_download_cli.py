"""Taking a trained adapter out: `akka registry models files|download|export` and the file routes behind them.

On the session's completed run (tests/conftest.py `completed_run`): its adapter, its base model and the merged
export are each written once for the module, then read by the tests. The downloaded adapter over the downloaded
base gives exactly the logits of the adapter and base as a worker loads them (the run's weights manifest in the
server's blob store, the base model's selected folder), its chat template is the one the run's rows were rendered
with, and the merged export gives the same logits as a plain Transformers model.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
from pathlib import Path

import httpx
import pytest

from tests.conftest import Cli, headers_for

pytestmark = pytest.mark.integration

MODEL = "optimize/tiny-llama-3.2"
ADAPTER_FILES = {"adapter_model.safetensors", "adapter_config.json", "tokenizer.json", "tokenizer_config.json",
                 "chat_template.jinja"}
PROMPT = [{"role": "user", "content": "What is the capital of Peru?"}]


def akka(*args: str) -> tuple[int, str, str]:
    """The CLI in this process, for module-scoped fixtures (which have no capsys)."""
    from optimize.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def taken(completed_run, sqlite_server, tmp_path_factory) -> dict:
    """The run's adapter and its base model downloaded, and the adapter exported merged (all with `-o json`)."""
    url = sqlite_server.url
    reference = completed_run["run"]["results"]["model"]
    version = httpx.get(f"{url}/v1/registry/models/{reference.replace(':', '/versions/')}",
                        headers=sqlite_server.headers).json()
    root = tmp_path_factory.mktemp("taken")
    written = {}
    for name, args in (("adapter", ["download", reference]),
                       ("base", ["download", version["servingModel"]["baseModel"]]),
                       ("merged", ["export", reference, "--merged"])):
        code, out, err = akka("registry", "models", *args, "-d", str(root / name), "-o", "json", "--server", url)
        assert code == 0, err
        written[name] = json.loads(out)
    return {"reference": reference, "version": version, "root": root, "url": url, "server": sqlite_server,
            "run": completed_run["run"], **written}


@pytest.fixture
def cli(capsys, sqlite_server) -> Cli:
    return Cli(capsys, sqlite_server.url)


# --- what the server keeps, as a worker loads it ---------------------------------------------------------------


def selected_folder(taken) -> Path:
    """The base model's folder in the server's model cache (a stand-in's folder is named by its commit)."""
    folder = taken["server"].data_dir / "models" / taken["version"]["servingModel"]["baseCommit"]
    assert folder.is_dir()
    return folder


def worker_adapter(taken, target: Path) -> Path:
    """The adapter folder a worker assembles: the files the weights manifest lists, from the blob store."""
    blobs = taken["server"].data_dir / "blobs" / "sha256"
    manifest_hex = taken["version"]["servingModel"]["artifact"]["manifestDigest"].removeprefix("sha256:")
    manifest = json.loads((blobs / manifest_hex[:2] / manifest_hex[2:4] / manifest_hex).read_bytes())
    target.mkdir()
    for item in manifest["files"]:
        digest = item["sha256"]
        shutil.copyfile(blobs / digest[:2] / digest[2:4] / digest, target / item["path"])
    return target


def logits(model, tokenizer):
    import torch

    ids = tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        return model(input_ids=ids["input_ids"]).logits


def peft_model(base: Path, adapter: Path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    return PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(base)), str(adapter)).eval()


# --- download ---------------------------------------------------------------------------------------------------


def test_download_writes_the_adapter_folder_verified(taken):
    from optimize.training.adapters import weights_digest

    answer, folder = taken["adapter"], taken["root"] / "adapter"
    assert answer["reference"] == taken["reference"] and answer["variant"] == "ADAPTER"
    assert answer["baseModel"] == taken["version"]["servingModel"]["baseModel"]
    assert answer["directory"] == str(folder)
    assert {item["path"] for item in answer["files"]} == ADAPTER_FILES
    assert sorted(os.listdir(folder)) == sorted(ADAPTER_FILES)  # nothing else: no partial file left
    for item in answer["files"]:
        assert sha256(folder / item["path"]) == item["sha256"]
        assert (folder / item["path"]).stat().st_size == item["size"]
    assert answer["size"] == sum(item["size"] for item in answer["files"])
    # the weights are the ones the run registered
    assert weights_digest(folder / "adapter_model.safetensors") == taken["version"]["servingModel"]["weightsDigest"]
    config = json.loads((folder / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["r"] == taken["version"]["servingModel"]["adapterRank"]
    # the base model by its repository, never by the server's cache path PEFT recorded while training
    assert config["base_model_name_or_path"] == MODEL
    assert not [path for path in folder.iterdir() if str(taken["server"].data_dir) in path.read_text(errors="ignore")]
    # the tokenizer files are the base model's, as selected
    selected = selected_folder(taken)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        assert sha256(folder / name) == sha256(selected / name)


def test_the_downloaded_adapter_gives_the_logits_a_worker_gets(taken, tmp_path):
    import torch
    from transformers import AutoTokenizer

    folder = taken["root"] / "adapter"
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    downloaded = logits(peft_model(taken["root"] / "base", folder), tokenizer)
    served = logits(peft_model(selected_folder(taken), worker_adapter(taken, tmp_path / "worker")),
                    AutoTokenizer.from_pretrained(str(selected_folder(taken))))
    assert torch.equal(downloaded, served)
    model = peft_model(taken["root"] / "base", folder)
    with model.disable_adapter():
        assert not torch.allclose(logits(model, tokenizer), downloaded)  # the trained adapter moves the logits


def test_the_chat_template_is_the_one_the_run_rendered_with(taken):
    from transformers import AutoTokenizer

    template = taken["adapter"]["chatTemplate"]
    tokenizer = AutoTokenizer.from_pretrained(str(taken["root"] / "adapter"))
    assert hashlib.sha256(tokenizer.chat_template.encode()).hexdigest() == template["sha256"]
    entry = httpx.get(f"{taken['url']}/v1/training/base-models/{MODEL}", headers=headers_for(taken["url"])).json()
    assert template["path"] == "chat_template.jinja" and template["source"] == entry["chatTemplate"] == "shipped"
    checked = [d for d in taken["run"]["lengthCheck"]["datasets"] if d.get("analysisId")]
    assert checked, taken["run"]["lengthCheck"]
    analysis = httpx.get(f"{taken['url']}/v1/training/datasets/analyses/{checked[0]['analysisId']}",
                         headers=headers_for(taken["url"])).json()
    assert json.dumps(analysis).count(template["sha256"]) >= 1  # the analysis (the worker's renderer) recorded it


def test_a_base_version_downloads_the_selected_folder(taken):
    from optimize.catalog.standins import files_digest

    answer, folder = taken["base"], taken["root"] / "base"
    assert answer["variant"] == "BASE" and answer["baseModel"] is None
    names = {item["path"] for item in answer["files"]}
    assert {"model.safetensors", "config.json", "tokenizer.json", "chat_template.jinja"} <= names
    assert names == set(os.listdir(selected_folder(taken)))
    assert files_digest(folder) == taken["version"]["servingModel"]["baseCommit"]  # a stand-in's commit


def test_files_lists_what_a_download_writes(cli, taken):
    listed = cli.json("registry", "models", "files", taken["reference"])
    assert [{key: item[key] for key in ("path", "sha256", "size")} for item in listed["files"]] == \
        taken["adapter"]["files"]
    assert {item["path"]: item["source"] for item in listed["files"]} == {
        "adapter_model.safetensors": "adapter", "adapter_config.json": "adapterConfig", "tokenizer.json": "base",
        "tokenizer_config.json": "base", "chat_template.jinja": "base"}
    assert listed["baseCommit"] == taken["version"]["servingModel"]["baseCommit"]
    text = cli.ok("registry", "models", "files", taken["reference"]).out
    assert "adapter_model.safetensors" in text and "5 files" in text and "chat_template.jinja (shipped" in text


def test_download_in_text_shows_each_file_and_force_writes_into_a_folder(cli, taken, tmp_path):
    target = tmp_path / "again"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    refused = cli("registry", "models", "download", taken["reference"], "-d", str(target))
    assert refused.code == 1 and f"{target} exists and is not empty" in refused.err
    assert "--force" in refused.err and sorted(os.listdir(target)) == ["notes.txt"]
    (target / "adapter_config.json").write_text("stale")
    done = cli.ok("registry", "models", "download", taken["reference"], "-d", str(target), "--force")
    assert "[1/5] adapter_config.json" in done.err and "verified" in done.err  # progress, per file, on stderr
    assert f"Wrote {taken['reference']} (adapter) to {target}: 5 files" in done.out
    assert "PeftModel.from_pretrained" in done.out
    assert sorted(os.listdir(target)) == sorted(ADAPTER_FILES | {"notes.txt"})  # others are left as they were
    assert sha256(target / "adapter_config.json") == sha256(taken["root"] / "adapter" / "adapter_config.json")


def test_a_damaged_file_is_refused_and_leaves_nothing(cli, taken, tmp_path):
    """A stored file whose bytes changed (same size, same time) no longer matches the digest its listing gives: the
    server refuses to send it (410, naming both digests), and the download writes nothing."""
    victim = selected_folder(taken) / "optimize-standin.json"
    original, stat = victim.read_bytes(), victim.stat()
    damaged = bytes([original[0] ^ 1]) + original[1:]
    target = tmp_path / "damaged"
    try:
        victim.write_bytes(damaged)
        os.utime(victim, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        refused = cli("registry", "models", "download", taken["adapter"]["baseModel"], "-d", str(target))
    finally:
        victim.write_bytes(original)
        os.utime(victim, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert refused.code == 1, refused.err
    assert (f"optimize-standin.json of {taken['adapter']['baseModel']} on this server no longer matches its digest "
            f"sha256:{hashlib.sha256(original).hexdigest()} (its bytes hash to "
            f"sha256:{hashlib.sha256(damaged).hexdigest()})") in refused.err
    assert "hint: select the base model again" in refused.err
    assert "optimize-standin.json" not in os.listdir(target)
    assert not [name for name in os.listdir(target) if name.startswith(".")]  # no partial file either


# --- export ----------------------------------------------------------------------------------------------------


def test_the_merged_export_is_a_plain_model_with_the_adapters_logits(taken):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    answer, folder = taken["merged"], taken["root"] / "merged"
    assert answer["merged"] is True and answer["reference"] == taken["reference"]
    assert answer["baseModel"] == taken["adapter"]["baseModel"]
    names = set(os.listdir(folder))
    assert {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json",
            "chat_template.jinja"} <= names
    assert not {name for name in names if name.startswith("adapter_") or name.startswith(".")}
    assert {item["path"] for item in answer["files"]} == names
    for item in answer["files"]:
        assert sha256(folder / item["path"]) == item["sha256"]
    assert not [name for name in os.listdir(folder.parent) if name.startswith(".merged.export-")]  # scratch gone
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    adapter_tokenizer = AutoTokenizer.from_pretrained(str(taken["root"] / "adapter"))
    assert tokenizer.chat_template == adapter_tokenizer.chat_template
    assert hashlib.sha256(tokenizer.chat_template.encode()).hexdigest() == taken["adapter"]["chatTemplate"]["sha256"]
    merged = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    assert not hasattr(merged, "peft_config")
    expected = logits(peft_model(taken["root"] / "base", taken["root"] / "adapter"), adapter_tokenizer)
    assert torch.allclose(logits(merged, tokenizer), expected, atol=1e-4)


def test_export_refusals(cli, taken, tmp_path):
    reference, base = taken["reference"], taken["adapter"]["baseModel"]
    unmerged = cli("registry", "models", "export", reference, "-d", str(tmp_path / "a"))
    assert unmerged.code == 2 and "say so with --merged" in unmerged.err
    assert f"akka registry models download {reference} --dir DIR" in unmerged.err
    of_base = cli("registry", "models", "export", base, "--merged", "-d", str(tmp_path / "b"))
    assert of_base.code == 1 and f"{base} is a base model, not an adapter: there is nothing to merge" in of_base.err
    assert f"akka registry models download {base} --dir DIR" in of_base.err
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "x").write_text("x")
    busy = cli("registry", "models", "export", reference, "--merged", "-d", str(tmp_path / "c"))
    assert busy.code == 1 and "exists and is not empty" in busy.err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_unknown_models_versions_and_files_are_refused(cli, taken, tmp_path):
    artifact, selector = taken["reference"].split(":")
    project, name = artifact.split("/")
    no_version = cli("registry", "models", "download", f"{project}/{name}:v99", "-d", str(tmp_path / "v"))
    assert no_version.code == 1 and f"model {project}/{name} has no version v99" in no_version.err
    no_model = cli("registry", "models", "export", f"{project}/nothing", "--merged", "-d", str(tmp_path / "m"))
    assert no_model.code == 1 and f"model {project}/nothing does not exist" in no_model.err
    assert not (tmp_path / "v").exists() and not (tmp_path / "m").exists()
    files = f"{taken['url']}/v1/registry/models/{project}/{name}/versions/{selector}/files"
    auth = headers_for(taken["url"])
    missing = httpx.get(f"{files}/nothing.bin", headers=auth)
    assert missing.status_code == 404 and missing.headers["content-type"] == "application/problem+json"
    assert missing.json()["detail"] == f"model {taken['reference']} has no file 'nothing.bin'"
    for escape in ("..%2F..%2Fserver.json", "%2E%2E/blobs", "%2Fetc%2Fpasswd"):
        refused = httpx.get(f"{files}/{escape}", headers=auth)
        assert refused.status_code == 422, escape
        assert "is not a relative path inside the model's folder" in refused.json()["detail"]
    served = httpx.get(f"{files}/adapter_config.json", headers=auth)
    assert served.status_code == 200 and served.headers["content-type"] == "application/octet-stream"
    assert hashlib.sha256(served.content).hexdigest() == served.headers["x-checksum-sha256"]
