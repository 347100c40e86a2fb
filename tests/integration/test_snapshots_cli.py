"""Snapshots through the CLI and API: retention by keep counts, pins that hold a snapshot against it, and
registering a snapshot's weights as a model version (idempotent; the final save registers as the run's model)."""

from __future__ import annotations

import json
import time
import uuid

import httpx
import pytest

from tests.conftest import Cli, chat_row, from_standin, write_jsonl
from tests.run_fixtures import MODEL

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def kept(sqlite_server, tmp_path_factory):
    """A run with keep counts, paused once with a save that is pinned, then resumed to its end."""
    tmp = tmp_path_factory.mktemp("snapshots")
    name = f"s{uuid.uuid4().hex[:8]}"
    client = httpx.Client(base_url=sqlite_server.url, headers=sqlite_server.headers, timeout=600)
    client.post(f"/v1/training/base-models/{MODEL}/select", json=from_standin(MODEL)).raise_for_status()
    from optimize.cli.main import main

    rows = [chat_row(f"question {i}", f"answer {i}") for i in range(16)]
    assert main(["registry", "datasets", "register", f"{name}/d", "-f", str(write_jsonl(tmp / "d.jsonl", rows)),
                 "--server", sqlite_server.url]) == 0
    client.post("/v1/training/projects", json={"name": name}).raise_for_status()
    document = {"kind": "run", "project": name, "baseModel": MODEL,
                "config": {"dataset": "d", "maxSeqLength": 128, "packing": False,  # two rows an update
                           "hyperparams": {"training": {"maxSteps": 12, "batchSize": 2}}},
                "execution": {"saveEvery": 2, "keepAdapters": 2, "keepTrainingStates": 1}}
    run_id = client.post("/v1/training/runs", json=document).json()["runId"]
    while client.get(f"/v1/training/runs/{run_id}").json()["phase"] != "PREPARING":
        time.sleep(0.1)
    assert client.post(f"/v1/training/runs/{run_id}/pause", json={"checkpoint": "save"}).status_code == 202
    while (paused := client.get(f"/v1/training/runs/{run_id}").json())["phase"] != "PAUSED":
        assert not paused["terminal"], paused
        time.sleep(0.1)
    return {"client": client, "run": run_id, "project": name, "pausedAt": paused["pause"]["snapshotId"],
            "tmp": tmp}


def test_a_pin_holds_a_snapshot_against_the_keep_counts(kept, sqlite_server, capsys):
    cli, client = Cli(capsys, sqlite_server.url), kept["client"]
    pinned = cli.ok("training", "snapshots", "pin", kept["pausedAt"][:10])
    assert "pinned: trainingState, weights" in pinned.out
    assert cli.json("training", "snapshots", "pin", kept["pausedAt"])["pinned"] == ["trainingState", "weights"]
    client.post(f"/v1/training/runs/{kept['run']}/resume").raise_for_status()
    done = json.loads(cli.ok("training", "runs", "wait", kept["run"], "-o", "json-compact").out.splitlines()[-1])
    assert done["phase"] == "COMPLETED", done["failureReason"]

    snapshots = cli.json("training", "runs", "snapshots", kept["run"])["snapshots"]
    by_id = {s["snapshotId"]: s for s in snapshots}
    final = snapshots[-1]
    assert final["final"] and final["kinds"] == ["weights", "trainingState"] and final["swept"] == []
    assert by_id[kept["pausedAt"]]["kinds"] == ["weights", "trainingState"]  # held by its pin
    others = [s for s in snapshots if s["snapshotId"] not in (kept["pausedAt"], final["snapshotId"])]
    assert all("trainingState" not in s["kinds"] for s in others)  # keepTrainingStates 1: only the final's
    with_weights = [s["step"] for s in others if "weights" in s["kinds"]]
    assert with_weights == [max(s["step"] for s in others)]  # keepAdapters 2: the final and the newest before it
    text = cli.ok("training", "runs", "snapshots", kept["run"]).out
    assert "HELD BY" in text and "pin (trainingState, weights)" in text and "SWEPT" in text

    swept = next(s for s in others if "weights" in s["swept"])
    refused = cli("training", "snapshots", "pin", swept["snapshotId"])
    assert refused.code == 1 and "swept by retention and cannot be pinned" in refused.err
    answer = client.post(f"/v1/training/snapshots/{swept['snapshotId']}/pin", json={"kinds": ["weights"]})
    assert answer.status_code == 400 and "was swept by retention" in answer.json()["detail"]
    assert client.post(f"/v1/training/snapshots/{swept['snapshotId']}/pin",
                       json={"kinds": ["everything"]}).status_code == 422

    # unpinned, it is swept like the others
    cli.ok("training", "snapshots", "unpin", kept["pausedAt"])
    after = cli.json("training", "snapshots", "get", kept["pausedAt"])
    assert after["pinned"] == [] and after["swept"] == ["trainingState", "weights"] and after["kinds"] == []


def test_registering_a_snapshot_is_idempotent_and_the_final_save_is_the_runs_model(kept, sqlite_server, capsys):
    cli, client = Cli(capsys, sqlite_server.url), kept["client"]
    run = client.get(f"/v1/training/runs/{kept['run']}").json()
    assert run["phase"] == "COMPLETED"  # the test above finished it
    snapshots = cli.json("training", "runs", "snapshots", kept["run"])["snapshots"]
    final = snapshots[-1]
    # the server reads the same weights digest and modules from the stored files: the same version
    assert cli.json("training", "snapshots", "register", final["snapshotId"])["model"] == run["results"]["model"]

    weights_only = next(s for s in snapshots if s["kinds"] == ["weights"])  # its training state swept
    first = cli.ok("training", "snapshots", "register", weights_only["snapshotId"])
    reference = f"{kept['project']}/tiny-llama-3.2:v2"
    assert f"registered as {reference}" in first.out
    assert cli.json("training", "snapshots", "register", weights_only["snapshotId"])["model"] == reference
    model = cli.json("registry", "models", "get", reference)
    assert model["lineage"]["producedBy"] == {"kind": "run", "id": kept["run"],
                                              "snapshotId": weights_only["snapshotId"], "step": weights_only["step"]}
    assert model["servingModel"]["weightsDigest"].startswith("sha256:")
    assert model["servingModel"]["weightsDigest"] != run["results"]["weightsDigest"]
    # a weights-only snapshot can start a branch as an adapter, never as a continuation
    dry = cli.json("training", "runs", "branch", kept["run"], "--snapshot", weights_only["snapshotId"], "--dry-run")
    assert dry["branch"]["restore"] == "weights" and "holds no training state (weights only)" in dry["branch"]["why"]
    refused = cli("training", "runs", "continue", kept["run"], "--snapshot", weights_only["snapshotId"], "--steps", "2")
    assert refused.code == 1 and "holds no training state" in refused.err
    named = cli.json("training", "snapshots", "register", weights_only["snapshotId"], "--name", "early")
    assert named["model"] == f"{kept['project']}/early:v1"
    shown = cli.ok("training", "snapshots", "get", weights_only["snapshotId"]).out
    assert f"model {reference}" in shown and f"model {kept['project']}/early:v1" in shown

    # an archived project takes no new candidates
    cli.ok("training", "projects", "archive", kept["project"])
    refused = cli("training", "snapshots", "register", weights_only["snapshotId"], "--name", "late")
    assert refused.code == 1 and "is archived and takes no new work" in refused.err
    assert f"akka training projects unarchive {kept['project']}" in refused.err
    cli.ok("training", "projects", "unarchive", kept["project"])

    swept = next(s for s in snapshots if s["kinds"] == [])
    refused = cli("training", "snapshots", "register", swept["snapshotId"])
    assert refused.code == 1 and "had its weights swept by retention; it cannot be registered" in refused.err
    assert client.get("/v1/training/snapshots/zzzzzz").status_code == 404
