"""A distillation's instructions and acceptance grader through the API: each refusal of the request names the
field (or both fields of the pair) and stores nothing; a distillation created with instructions and a scoring
bundle's function as its acceptance grader keeps them in its settings (the bundle at its exact version), and its
worker's spec carries them — the instructions, the grader pinned to its archive's digest, the least score — with
the archive readable through the job's lease.

The app runs in this process (`create_app` on a fresh data folder, through Starlette's TestClient) with no
scheduler loop and no executor: the test grants the distillation its lease itself (the scheduler's own `admit`)
and reads the internal routes as its worker would.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from optimize.api.app import create_app
from optimize.core.settings import ServerSettings
from optimize.distillation.job import KIND as DISTILLATION
from optimize.jobs.scheduler import Scheduler
from optimize.store.tables import JobLease
from tests.conftest import from_standin

MODEL = "optimize/tiny-llama-3.2"  # a stand-in, imported from the copy the session built
INTERNAL = "/v1/internal/jobs"
NS = "accept"
SCORE = "def compute_score(prompt_messages, completion_text, fields):\n    return 1.0\n"


def register_dataset(client: TestClient, dataset: str, rows: list[dict]) -> None:
    data = "".join(json.dumps(row) + "\n" for row in rows).encode()
    opened = client.post("/v1/registry/dataset-uploads", json={
        "dataset": dataset, "format": "chat-jsonl-v1",
        "shards": [{"index": 0, "path": "examples.jsonl", "sha256": hashlib.sha256(data).hexdigest(),
                    "bytes": len(data), "lines": len(rows)}]})
    assert opened.status_code == 200, opened.text
    upload = opened.json()["uploadId"]
    sent = client.put(f"/v1/registry/dataset-uploads/{upload}/shards/0", content=data,
                      headers={"content-type": "application/x-ndjson"})
    assert sent.status_code in (200, 201), sent.text
    assert client.post(f"/v1/registry/dataset-uploads/{upload}/commit", json={}).status_code == 200


def register_bundle(client: TestClient, reference: str, files: dict[str, str]) -> str:
    """Register a scoring bundle of `files`; the sha256 of its archive."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    data = buffer.getvalue()
    sha256 = hashlib.sha256(data).hexdigest()
    sent = client.put(f"/v1/registry/bundles/{reference}/archives/{sha256}", content=data,
                      headers={"content-type": "application/zip"})
    assert sent.status_code in (200, 201), sent.text
    registered = client.post(f"/v1/registry/bundles/{reference}/versions", json={"digest": f"sha256:{sha256}"})
    assert registered.status_code in (200, 201), registered.text
    return sha256


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    """An in-process server with the stand-in selected, a project, a source of questions and a scoring bundle."""
    data_dir = tmp_path_factory.mktemp("distillation-acceptance")
    app = create_app(ServerSettings(data_dir=data_dir, detect_gpus=False))
    admin = (data_dir / "admin-token").read_text().strip()
    client = TestClient(app, raise_server_exceptions=False, headers={"Authorization": f"Bearer {admin}"})
    client.post(f"/v1/training/base-models/{MODEL}/select", json=from_standin(MODEL)).raise_for_status()
    client.post("/v1/training/projects", json={"name": NS}).raise_for_status()
    register_dataset(client, f"{NS}/questions", [
        {"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "2+2?"},
                      {"role": "assistant", "content": "4"}]}])
    sha256 = register_bundle(client, f"{NS}/graders", {"score.py": SCORE})
    yield SimpleNamespace(client=client, bundle=sha256)
    client.close()


def body(**given) -> dict:
    return {"teacher": MODEL, "source": f"{NS}/questions", "target": f"{NS}/kept", "project": NS, **given}


@pytest.mark.parametrize("given, words", [
    ({"instructions": "x" * 32_769}, "instructions must be text of 1 to 32,768 characters"),
    ({"instructions": ""}, "instructions must be text of 1 to 32,768 characters"),
    ({"minScore": 0.5}, "minScore (--min-score) needs acceptGrader (--accept-grader)"),
    ({"acceptGrader": "exact"}, "acceptGrader (--accept-grader) needs minScore (--min-score)"),
    ({"acceptGrader": "exact", "minScore": 1.5}, "minScore must be a number from 0 to 1"),
    ({"acceptGrader": "exact", "minScore": -0.1}, "minScore must be a number from 0 to 1"),
    ({"acceptGrader": "exact", "minScore": "high"}, "minScore must be a number from 0 to 1"),
    ({"acceptGrader": "sometimes", "minScore": 0.5},
     "acceptGrader: grader 'sometimes' is not one of json-label-match, exact"),
    ({"acceptGrader": "regex:(a)\\1", "minScore": 0.5}, "uses a backreference"),
    ({"acceptGrader": "model:optimize/tiny-llama-3.2", "minScore": 0.5},
     "a judge model cannot be a distillation's acceptance grader"),
    ({"acceptGrader": f"bundle:{NS}/nope#score", "minScore": 0.5},
     "needs a scoring bundle the registry does not hold"),
    ({"acceptGrader": f"bundle:{NS}/graders#missing", "minScore": 0.5}, "missing"),
    ({"acceptGrader": "http://scores.example.com/score", "minScore": 0.5},
     "the http grader would send rows to scores.example.com"),
])
def test_a_bad_instruction_or_acceptance_grader_is_refused_by_name_and_stores_nothing(app, given, words):
    answer = app.client.post("/v1/training/distillations", json=body(**given))
    assert answer.status_code in (400, 404, 422), answer.text
    assert words in answer.json()["detail"], answer.json()
    assert app.client.get("/v1/training/distillations").json() == {"distillations": []}


def test_the_instructions_and_grader_are_kept_shown_and_handed_to_the_worker_with_the_bundle_readable(app):
    client = app.client
    created = client.post("/v1/training/distillations", json=body(
        instructions="Answer with one number.", acceptGrader=f"bundle:{NS}/graders#score", minScore=0.75))
    assert created.status_code == 202, created.text
    ident = created.json()["distillationId"]
    settings = client.get(f"/v1/training/distillations/{ident}").json()["settings"]
    assert settings["instructions"] == "Answer with one number."
    assert settings["acceptGrader"] == f"bundle:{NS}/graders:v1#score:compute_score"  # its exact version
    assert settings["minScore"] == 0.75 and "acceptGraderBundle" not in settings

    deployment = client.app.state.deployment
    Scheduler(deployment).admit(DISTILLATION)
    with deployment.store.transaction() as session:
        token = session.scalar(select(JobLease.token).where(JobLease.kind == "distillation",
                                                            JobLease.job_id == ident, JobLease.ended_at.is_(None)))
    assert token, "the distillation was not granted a lease"
    lease = {"X-Lease-Token": token}
    spec = client.get(f"{INTERNAL}/distillation/{ident}", headers=lease)
    assert spec.status_code == 200, spec.text
    handed = spec.json()["settings"]
    assert handed["instructions"] == "Answer with one number." and handed["minScore"] == 0.75
    assert handed["acceptGrader"] == f"bundle:{NS}/graders:v1@sha256:{app.bundle}#score:compute_score"
    blob = client.get(f"{INTERNAL}/distillation/{ident}/blobs/{app.bundle}", headers=lease)
    assert blob.status_code == 200, blob.text  # the worker downloads the grader's archive through its lease
    client.post(f"/v1/training/distillations/{ident}/cancel").raise_for_status()


def test_a_distillation_without_them_shows_none(app):
    created = app.client.post("/v1/training/distillations", json=body(target=f"{NS}/plain"))
    assert created.status_code == 202, created.text
    settings = created.json()["settings"]
    assert (settings["instructions"], settings["acceptGrader"], settings["minScore"]) == (None, None, None)
    app.client.post(f"/v1/training/distillations/{created.json()['distillationId']}/cancel").raise_for_status()
