"""A stored file found corrupt is quarantined by the read that finds it (410 `corrupt`); every later read of it on
a request path answers 410 `gone`, naming what is missing and how it comes back, never a 500: an analysis' per-row
lengths read by its histogram, on either store; and the blob store's own `held_path`/`open_held`, which those
routes read through; a run's length check before its claim, which goes on without the check and says why.

The app runs in this process (`create_app` through Starlette's TestClient, no scheduler loop and no executor): the
test grants the analysis its lease with the scheduler's own `admit` and finishes it as its worker would.
"""

from __future__ import annotations

import hashlib

import pytest
from fastapi.testclient import TestClient

from optimize.api.app import create_app
from optimize.blobs.local import RESTORE_HINT, LocalBlobStore
from optimize.core.errors import Corrupt, Gone
from optimize.core.settings import ServerSettings
from optimize.store.tables import Analysis
from optimize.training.admission.lengths import Subject, evaluate
from tests.api.test_worker_blob_scope import INTERNAL, MODEL, leased_analysis, register
from tests.conftest import fresh_postgres_url, from_standin, postgres_available


def test_a_quarantined_object_is_refused_gone_by_every_later_read(tmp_path):
    blobs = LocalBlobStore(tmp_path / "blobs")
    data = b"held bytes\n"
    sha256 = hashlib.sha256(data).hexdigest()
    writer = blobs.writer()
    writer.write(data)
    writer.commit(sha256)
    with blobs.open_held(sha256, "the test file") as handle:
        assert handle.read() == data
    blobs.path_for(sha256).write_bytes(b"other bytes\n")
    with pytest.raises(Corrupt):  # the read that finds it corrupt quarantines it
        blobs.held_path(sha256, "the test file")
    for read in (blobs.held_path, blobs.open_held):
        with pytest.raises(Gone) as gone:
            read(sha256, "the test file")
        assert (gone.value.message, gone.value.hint) == ("the test file is not held by this server", RESTORE_HINT)
    with pytest.raises(Gone) as gone:
        blobs.open_held(sha256)
    assert gone.value.message == f"stored object sha256:{sha256} is not held by this server"


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_histogram_of_quarantined_lengths_is_gone_at_every_read(backend, tmp_path):
    if backend == "postgres" and not postgres_available():
        pytest.skip("no PostgreSQL answers")
    url = fresh_postgres_url() if backend == "postgres" else None
    app = create_app(ServerSettings(data_dir=tmp_path, detect_gpus=False, database_url=url))
    admin = (tmp_path / "admin-token").read_text().strip()
    client = TestClient(app, raise_server_exceptions=False, headers={"Authorization": f"Bearer {admin}"})
    try:
        client.post(f"/v1/training/base-models/{MODEL}/select", json=from_standin(MODEL)).raise_for_status()
        register(client, "lost/d", "quarantined lengths")
        analysis_id, token = leased_analysis(client, "lost/d")
        lengths = b"[7, 7, 3]\n"
        sha256 = hashlib.sha256(lengths).hexdigest()
        lease = {"X-Lease-Token": token}
        assert client.put(f"{INTERNAL}/analysis/{analysis_id}/blobs/{sha256}", content=lengths,
                          headers=lease).status_code == 201
        finished = client.post(f"{INTERNAL}/analysis/{analysis_id}/result", headers=lease,
                               json={"report": {"rows": 1}, "lengthsSha256": sha256})
        assert finished.json() == {"phase": "done"}, finished.text
        histogram = f"/v1/training/datasets/analyses/{analysis_id}/histogram"
        assert client.get(histogram).json()["rows"] == 1

        held = app.state.registry.blobs.path_for(sha256)
        held.write_bytes(lengths.replace(b"3", b"4"))  # the same size, other bytes
        first = client.get(histogram)
        assert (first.status_code, first.json()["code"]) == (410, "corrupt")
        for _ in range(2):
            later = client.get(histogram)
            assert later.status_code == 410, later.text
            body = later.json()
            assert body["code"] == "gone"
            assert body["detail"] == (f"the per-row lengths file sha256:{sha256} of analysis {analysis_id[:12]} is "
                                      "not held by this server")
            assert "restore it from a backup" in body["hint"]
        assert client.get(f"/v1/training/datasets/analyses/{analysis_id}").json()["phase"] == "done"
        # a run waiting for this analysis goes on without its length check, which says why (never an error)
        version = client.get("/v1/registry/datasets/lost/d").json()
        store = app.state.registry.store
        with store.transaction() as session:
            commit = session.get(Analysis, analysis_id).base_commit
            sections, state = evaluate(session, app.state.registry.blobs,
                                       [Subject("training", version["reference"], version["digest"])], MODEL,
                                       commit, 512, "error")
        assert state == "notRun"
        assert sections[0]["status"] == "failed" and sections[0]["analysisId"] == analysis_id
        assert sections[0]["reason"] == body["detail"]
    finally:
        client.close()
        app.state.registry.store.dispose()
