"""Where the server keeps things (a dataset shard's or a bundle archive's blob, a base model's folder, the blob
store) is shown to an administrator only: a reader's or a trainer's answers carry null there, and the data dir's
path nowhere, registrations included."""

from __future__ import annotations

import hashlib
import io
import json
import uuid
import zipfile

import httpx
import pytest

from tests.conftest import chat_row, from_standin

pytestmark = pytest.mark.integration
MODEL = "optimize/tiny-llama-3.2"


def _token(server, role: str) -> dict[str, str]:
    answer = httpx.post(f"{server.url}/v1/auth/tokens", headers=server.headers,
                        json={"name": f"paths-{role}-{uuid.uuid4().hex[:6]}", "role": role})
    assert answer.status_code == 201, answer.text
    return {"Authorization": f"Bearer {answer.json()['token']}"}


def _dataset(server, headers, dataset: str) -> httpx.Response:
    data = (json.dumps(chat_row(dataset)) + "\n").encode()  # bytes of its own: sent, not already held
    shard = {"index": 0, "path": "examples.jsonl", "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
             "lines": 1}
    uploads = f"{server.url}/v1/registry/dataset-uploads"
    session = httpx.post(uploads, headers=headers, json={"dataset": dataset, "format": "chat-jsonl-v1",
                                                         "shards": [shard]}).json()
    assert httpx.put(f"{uploads}/{session['uploadId']}/shards/0", headers=headers, content=data).status_code < 300
    return httpx.post(f"{uploads}/{session['uploadId']}/commit", headers=headers, json={})


def _bundle(server, headers, bundle: str, marker: str) -> httpx.Response:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("reward.py", f"def compute_score(answer, item):  # {marker}\n    return 1.0\n")
    data = buffer.getvalue()
    sha256 = hashlib.sha256(data).hexdigest()
    sent = httpx.put(f"{server.url}/v1/registry/bundles/{bundle}/archives/{sha256}", content=data,
                     headers={**headers, "Content-Type": "application/zip"})
    assert sent.status_code == 201, sent.text
    return httpx.post(f"{server.url}/v1/registry/bundles/{bundle}/versions", headers=headers,
                      json={"digest": f"sha256:{sha256}"})


@pytest.fixture(scope="module")
def held(sqlite_server) -> dict[str, str]:
    """A dataset and a bundle registered by the admin, the stand-in base model selected."""
    ns = f"paths{uuid.uuid4().hex[:6]}"
    admin = sqlite_server.headers
    httpx.post(f"{sqlite_server.url}/v1/training/base-models/{MODEL}/select", headers=admin, json=from_standin(MODEL),
               timeout=600).raise_for_status()
    assert _dataset(sqlite_server, admin, f"{ns}/d").status_code == 200
    assert _bundle(sqlite_server, admin, f"{ns}/b", "admin").status_code == 200
    return {"ns": ns}


def _reads(url: str, ns: str) -> dict[str, str]:
    datasets, bundles = f"{url}/v1/registry/datasets/{ns}/d", f"{url}/v1/registry/bundles/{ns}/b"
    return {"dataset": datasets, "version": f"{datasets}/versions/v1", "bundle": bundles,
            "bundleVersion": f"{bundles}/versions/v1", "baseModel": f"{url}/v1/training/base-models/{MODEL}",
            "info": f"{url}/v1/registry/info"}


def _paths(answers: dict[str, dict]) -> list:
    return [answers["dataset"]["objects"][0]["location"], answers["version"]["objects"][0]["location"],
            answers["bundle"]["location"], answers["bundleVersion"]["location"],
            answers["baseModel"]["selection"]["path"], answers["info"]["blobs"]]


@pytest.mark.parametrize("role", ["reader", "trainer"])
def test_a_reader_or_a_trainer_is_shown_no_server_path(sqlite_server, held, role):
    headers = _token(sqlite_server, role)
    answers = {}
    for name, url in _reads(sqlite_server.url, held["ns"]).items():
        answer = httpx.get(url, headers=headers)
        assert answer.status_code == 200, (name, answer.text)
        assert str(sqlite_server.data_dir) not in answer.text, name
        answers[name] = answer.json()
    assert _paths(answers) == [None] * 6
    if role == "trainer":  # what a registration answers is as bare
        for registered in (_dataset(sqlite_server, headers, f"{held['ns']}/t"),
                           _bundle(sqlite_server, headers, f"{held['ns']}/t", "trainer")):
            assert registered.status_code == 200 and str(sqlite_server.data_dir) not in registered.text
            assert (registered.json().get("objects") or [registered.json()])[0]["location"] is None


def test_an_administrator_is_shown_where_things_are_kept(sqlite_server, held):
    answers = {name: httpx.get(url, headers=sqlite_server.headers).json()
               for name, url in _reads(sqlite_server.url, held["ns"]).items()}
    shown = _paths(answers)
    assert all(str(sqlite_server.data_dir) in path for path in shown), shown
