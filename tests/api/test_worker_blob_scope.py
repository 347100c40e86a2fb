"""A worker's lease reads only its own job's blobs: the inputs its spec names (a dataset's shards, the files of the
adapter or save it loads) are served, any other digest — another dataset's shard the store holds, or one it never
held — is answered 403 `forbidden` naming the job and the blob, and a lease the job does not hold is still 409
`lease_lost` before anything else.

The app runs in this process (`create_app` on a fresh data folder, through Starlette's TestClient) with no
scheduler loop and no executor: the test grants the analyses their leases itself (the scheduler's own `admit`,
which launches nothing without an executor) and calls the internal routes as their workers would.
"""

from __future__ import annotations

import hashlib
import json
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from optimize.analysis.job import KIND as ANALYSIS
from optimize.api.app import create_app
from optimize.blobs.local import LocalBlobStore
from optimize.core.settings import ServerSettings
from optimize.jobs.kinds import Readable
from optimize.jobs.scheduler import Scheduler
from optimize.serving.job import KIND as ENDPOINT
from optimize.store.tables import JobLease
from tests.conftest import from_standin

MODEL = "optimize/tiny-llama-3.2"  # a stand-in, imported from the copy the session built
INTERNAL = "/v1/internal/jobs"


def register(client: TestClient, dataset: str, text: str) -> str:
    """Register a one-row chat dataset; the sha256 of its one shard."""
    row = json.dumps({"messages": [{"role": "user", "content": text}, {"role": "assistant", "content": "ok"}]})
    data = (row + "\n").encode()
    sha256 = hashlib.sha256(data).hexdigest()
    opened = client.post("/v1/registry/dataset-uploads", json={
        "dataset": dataset, "format": "chat-jsonl-v1",
        "shards": [{"index": 0, "path": "examples.jsonl", "sha256": sha256, "bytes": len(data), "lines": 1}]})
    assert opened.status_code == 200, opened.text
    upload = opened.json()["uploadId"]
    sent = client.put(f"/v1/registry/dataset-uploads/{upload}/shards/0", content=data,
                      headers={"content-type": "application/x-ndjson"})
    assert sent.status_code in (200, 201), sent.text
    committed = client.post(f"/v1/registry/dataset-uploads/{upload}/commit", json={})
    assert committed.status_code == 200, committed.text
    return sha256


def leased_analysis(client: TestClient, dataset: str) -> tuple[str, str]:
    """(analysis id, its worker's lease token) of an analysis of `dataset`, granted as the scheduler grants it."""
    started = client.post("/v1/training/datasets/analyses", json={"dataset": dataset, "model": MODEL})
    assert started.status_code in (200, 201, 202), started.text
    analysis_id = started.json()["analysisId"]
    training = client.app.state.deployment
    Scheduler(training).admit(ANALYSIS)
    with training.store.transaction() as session:
        token = session.scalar(select(JobLease.token).where(JobLease.kind == "analysis",
                                                            JobLease.job_id == analysis_id,
                                                            JobLease.ended_at.is_(None)))
    assert token, f"analysis {analysis_id} was not granted a lease"
    return analysis_id, token


@pytest.fixture(scope="module")
def scoped(tmp_path_factory):
    """An in-process server with two datasets and a leased analysis of each."""
    data_dir = tmp_path_factory.mktemp("blob-scope")
    app = create_app(ServerSettings(data_dir=data_dir, detect_gpus=False))
    admin = (data_dir / "admin-token").read_text().strip()
    client = TestClient(app, raise_server_exceptions=False, headers={"Authorization": f"Bearer {admin}"})
    client.post(f"/v1/training/base-models/{MODEL}/select", json=from_standin(MODEL)).raise_for_status()
    shards = {"a": register(client, "scope/a", "blob scope: dataset a"),
              "b": register(client, "scope/b", "blob scope: dataset b")}
    jobs = {"a": leased_analysis(client, "scope/a"), "b": leased_analysis(client, "scope/b")}
    yield SimpleNamespace(client=client, shards=shards, jobs=jobs)
    client.close()
    app.state.registry.store.dispose()


def read(client: TestClient, job: tuple[str, str], sha256: str):
    analysis_id, token = job
    return client.get(f"{INTERNAL}/analysis/{analysis_id}/blobs/{sha256}", headers={"X-Lease-Token": token})


def test_a_lease_reads_its_own_jobs_input(scoped):
    for name in ("a", "b"):
        answer = read(scoped.client, scoped.jobs[name], scoped.shards[name])
        assert answer.status_code == 200, answer.text
        assert hashlib.sha256(answer.content).hexdigest() == scoped.shards[name]


def test_another_jobs_blob_is_forbidden_though_the_store_holds_it(scoped):
    for reader, other in (("a", "b"), ("b", "a")):
        assert scoped.client.app.state.registry.blobs.holds(scoped.shards[other])
        answer = read(scoped.client, scoped.jobs[reader], scoped.shards[other])
        assert answer.status_code == 403, answer.text
        assert answer.headers["content-type"].startswith("application/problem+json")
        body = answer.json()
        assert body["code"] == "forbidden"
        assert body["detail"] == f"analysis {scoped.jobs[reader][0]} does not read blob {scoped.shards[other][:12]}…"


def test_a_blob_never_held_is_forbidden_too_so_a_lease_learns_nothing_of_the_store(scoped):
    answer = read(scoped.client, scoped.jobs["a"], "0" * 64)
    assert answer.status_code == 403 and answer.json()["code"] == "forbidden"


def test_a_lease_the_job_does_not_hold_is_refused_before_the_blob_is_looked_at(scoped):
    analysis_a, token_a = scoped.jobs["a"]
    analysis_b, _token_b = scoped.jobs["b"]
    for job in ((analysis_a, "not-the-lease"), (analysis_b, token_a)):  # a bad token; another job's token
        answer = read(scoped.client, job, scoped.shards["a"])
        assert answer.status_code == 409 and answer.json()["code"] == "lease_lost", answer.text
    malformed = read(scoped.client, scoped.jobs["a"], "not-a-digest")
    assert malformed.status_code == 422, malformed.text


def test_a_manifest_opens_the_files_it_lists_and_nothing_else(tmp_path):
    """A save's or an adapter's manifest is readable with the files it lists (read from the store once)."""
    store = LocalBlobStore(tmp_path / "blobs")

    def put(data: bytes) -> str:
        writer = store.writer()
        writer.write(data)
        writer.commit(sha256 := hashlib.sha256(data).hexdigest())
        return sha256

    listed, unlisted = put(b"adapter weights"), put(b"someone else's weights")
    manifest = put(json.dumps({"kind": "weights", "step": 1,
                               "files": [{"path": "adapter_model.safetensors", "sha256": listed, "bytes": 15}]}
                              ).encode())
    endpoint = SimpleNamespace(adapters=[{"name": "shop/m:v1", "manifestDigest": f"sha256:{manifest}"}])
    readable = ENDPOINT.readable_blobs(None, None, endpoint)
    assert readable.allows(manifest, store) and readable.allows(listed, store)
    assert not readable.allows(unlisted, store)
    assert not Readable().allows(listed, store)  # nothing is readable unless the job names it
    missing = Readable(manifests=frozenset({"1" * 64}))  # a manifest not held lists nothing
    assert not missing.allows(listed, store)
