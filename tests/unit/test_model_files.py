"""A model version's files (optimize.registry.model_files) on a migrated SQLite store, a local blob store and the
shipped catalog: what an adapter's download holds, the corrected chat template where the catalog says so, the
base model's folder as selected, and the refusals (a path leaving the folder, another commit selected, weights no
longer held). The integration tests (test_model_download_cli.py) download a trained run's adapter end to end."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from optimize.blobs.local import LocalBlobStore
from optimize.catalog.catalog import load_catalog
from optimize.catalog.standins import FAMILIES, template_text
from optimize.chat.corrections import corrected_template
from optimize.core.clock import utcnow
from optimize.core.errors import Conflict, Gone, Invalid, NotFound
from optimize.registry import model_files, models
from optimize.store.tables import BaseModelSelection
from tests.conftest import migrated_store

GEMMA = "optimize/tiny-gemma-4"  # the catalog renders it under Optimize's corrected template
COMMIT = "ab" * 32


@pytest.fixture
def store(tmp_path):
    store = migrated_store("sqlite", tmp_path)
    yield store
    store.dispose()


@pytest.fixture
def blobs(tmp_path) -> LocalBlobStore:
    return LocalBlobStore(tmp_path / "blobs")


def put(blobs: LocalBlobStore, data: bytes) -> str:
    writer = blobs.writer()
    writer.write(data)
    digest = hashlib.sha256(data).hexdigest()
    writer.commit(digest)
    return digest


def base_folder(tmp_path: Path, template_in_config: bool = False) -> Path:
    folder = tmp_path / "models" / COMMIT
    folder.mkdir(parents=True)
    template = template_text(FAMILIES["gemma4"])
    config = {"tokenizer_class": "TokenizersBackend", **({"chat_template": template} if template_in_config else {})}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "tokenizer.json").write_text("{}")
    (folder / "config.json").write_text('{"model_type": "gemma4_text"}')
    (folder / "model.safetensors").write_bytes(b"weights")
    (folder / ".cache").mkdir()
    (folder / ".cache" / "hub.lock").write_text("")  # hidden: never listed
    if not template_in_config:
        (folder / "chat_template.jinja").write_text(template)
    return folder


def register(store, blobs, folder: Path, selected_commit: str = COMMIT) -> str:
    """Select GEMMA at `selected_commit` from `folder`, and register an adapter over it at COMMIT."""
    config = {"base_model_name_or_path": str(folder), "peft_type": "LORA", "r": 8}
    listed = [{"path": "adapter_model.safetensors", "sha256": put(blobs, b"lora"), "bytes": 4},
              {"path": "adapter_config.json", "sha256": put(blobs, json.dumps(config).encode()),
               "bytes": len(json.dumps(config))}]
    manifest = put(blobs, json.dumps({"kind": "weights", "step": 4, "files": listed}).encode())
    with store.transaction() as session:
        session.add(BaseModelSelection(entry_id=GEMMA, repository=GEMMA, commit=selected_commit,
                                       content_digest=COMMIT, source="import", path=str(folder),
                                       selected_at=utcnow()))
        base = models.register_base_model(session, GEMMA, COMMIT, GEMMA)
        descriptor = {"variant": "ADAPTER", "baseModel": f"optimize/tiny-gemma-4:v{base.version}",
                      "baseRepository": GEMMA, "baseCommit": COMMIT, "adapterRank": 8,
                      "artifact": {"kind": "weights", "manifestDigest": f"sha256:{manifest}"}}
        models.register_version(session, "proj", "tools", variant="ADAPTER", descriptor=descriptor,
                                lineage={"producedBy": {"kind": "run", "id": "r1"}})
    return "proj/tools:v1"


def files(store, blobs, selector="v1", namespace="proj", name="tools"):
    return model_files.version_files(store, blobs, load_catalog(), namespace, name, selector)


@pytest.mark.parametrize("template_in_config", [False, True])
def test_an_adapter_carries_the_corrected_template_it_trained_under(store, blobs, tmp_path, template_in_config):
    folder = base_folder(tmp_path, template_in_config)
    register(store, blobs, folder)
    listed = files(store, blobs)
    by_path = {item.path: item for item in listed.files}
    assert list(by_path) == sorted(["adapter_config.json", "adapter_model.safetensors", "chat_template.jinja",
                                    "tokenizer.json", "tokenizer_config.json"])
    assert [by_path[p].source for p in by_path] == ["adapterConfig", "adapter", "chatTemplate", "base", "base"]
    expected = corrected_template("gemma4", template_text(FAMILIES["gemma4"])).encode()
    assert expected != template_text(FAMILIES["gemma4"]).encode()
    template = by_path["chat_template.jinja"]
    assert template.content == expected and template.sha256 == hashlib.sha256(expected).hexdigest()
    assert listed.chat_template == {"path": "chat_template.jinja", "sha256": template.sha256, "source": "corrected"}
    assert json.loads(by_path["adapter_config.json"].content)["base_model_name_or_path"] == GEMMA
    answer = listed.answer().model_dump(mode="json", by_alias=True)
    assert answer["reference"] == "proj/tools:v1" and answer["variant"] == "ADAPTER"
    assert answer["baseModel"] == "optimize/tiny-gemma-4:v1" and answer["baseCommit"] == COMMIT
    assert answer["size"] == sum(item["size"] for item in answer["files"])
    served = model_files.version_file(store, blobs, load_catalog(), "proj", "tools", "latest", "chat_template.jinja")
    assert served.content == expected


def test_a_base_version_is_its_folder_as_selected(store, blobs, tmp_path):
    folder = base_folder(tmp_path)
    register(store, blobs, folder)
    listed = files(store, blobs, "v1", "optimize", "tiny-gemma-4")
    assert [item.path for item in listed.files] == ["chat_template.jinja", "config.json", "model.safetensors",
                                                    "tokenizer.json", "tokenizer_config.json"]
    assert all(item.source == "base" and item.location == folder / item.path for item in listed.files)
    assert listed.chat_template["source"] == "shipped"  # as the folder ships it; the adapter carries the correction
    item = listed.files[2]
    assert item.sha256 == hashlib.sha256(b"weights").hexdigest() and item.size == 7


def test_the_folder_listing_is_hashed_once_and_again_when_a_file_changes(tmp_path):
    folder = base_folder(tmp_path)
    first = model_files.folder_listing(folder)
    cache = folder.parent / f".files-{folder.name}.json"
    assert set(json.loads(cache.read_text())) == set(first)
    stat = (folder / "config.json").stat()
    (folder / "config.json").write_text('{"model_type": "other"}!')  # another size
    os.utime(folder / "config.json", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    again = model_files.folder_listing(folder)
    assert again["config.json"][0] == hashlib.sha256(b'{"model_type": "other"}!').hexdigest()
    assert again["model.safetensors"] == first["model.safetensors"]


@pytest.mark.parametrize("path", ["../x", "a/../../b", "/etc/passwd", "a\\b", "", "a//b", "./a", "a/.."])
def test_a_path_that_could_leave_the_folder_is_refused(path):
    with pytest.raises(Invalid, match="is not a relative path inside the model's folder"):
        model_files.check_file_path(path)


def test_unknown_files_versions_and_missing_weights_are_refused(store, blobs, tmp_path):
    register(store, blobs, base_folder(tmp_path))
    catalog = load_catalog()
    with pytest.raises(NotFound, match="model proj/tools:v1 has no file 'model.safetensors'"):
        model_files.version_file(store, blobs, catalog, "proj", "tools", "v1", "model.safetensors")
    with pytest.raises(NotFound, match="model proj/tools has no version v2"):
        files(store, blobs, "v2")
    with pytest.raises(NotFound, match="model proj/nothing does not exist"):
        files(store, blobs, name="nothing")
    weights = next(item for item in files(store, blobs).files if item.path == "adapter_model.safetensors")
    weights.location.unlink()
    with pytest.raises(Gone, match=r"adapter_model.safetensors of proj/tools:v1 \(sha256:[0-9a-f]{64}\) is no longer"):
        files(store, blobs)


def test_another_commit_selected_is_refused(store, blobs, tmp_path):
    register(store, blobs, base_folder(tmp_path), selected_commit="cd" * 32)
    with pytest.raises(Conflict) as refused:
        files(store, blobs)
    assert refused.value.message == (f"the base model of proj/tools:v1, {GEMMA}, is selected here at commit "
                                     f"cdcdcdcdcdcd, not at abababababab that proj/tools:v1 belongs to")
    assert f"akka training base-models select {GEMMA}" in refused.value.hint
