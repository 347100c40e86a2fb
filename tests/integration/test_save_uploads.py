"""The save upload queue under a slow uploader (a worker upload rate the operator set): saves with newer ones
behind them upload only their weights, training state still lands at bounded intervals (skipping the saves
waiting before it), the saves between the upload in progress and the newest are skipped when the run pauses, and
a pause resumes from the newest save that holds training state, never from a weights-only one; a pause asked
again while the run pauses is the same pause, and another is refused."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.conftest import Cli, chat_row, from_standin, start_server, write_jsonl
from tests.run_fixtures import MODEL, write_plan

pytestmark = pytest.mark.integration
RATE = "150000"  # bytes a second: a full save (240 KB: adapter and optimizer state) takes about 15 updates


@pytest.fixture(scope="module")
def slow(tmp_path_factory):
    """One server with the slow uploader for the module (its own warm worker included, since the upload rate is a
    worker's setting): each test trains a run of its own in the project `slow`."""
    tmp_path = tmp_path_factory.mktemp("slow")
    proc = start_server(tmp_path / "server", env={"OPTIMIZE_WORKER_UPLOAD_BYTES_PER_SECOND": RATE})
    client = httpx.Client(base_url=proc.url, headers=proc.headers, timeout=600)
    client.post(f"/v1/training/base-models/{MODEL}/select", json=from_standin(MODEL)).raise_for_status()
    rows = write_jsonl(tmp_path / "d.jsonl", [chat_row(f"question {i}", f"answer {i}") for i in range(32)])
    from optimize.cli.main import main

    assert main(["registry", "datasets", "register", "slow/d", "-f", str(rows), "--server", proc.url]) == 0
    client.post("/v1/training/projects", json={"name": "slow"}).raise_for_status()
    yield proc, client
    proc.stop()


def plan(steps: int) -> dict:
    return {"kind": "run", "project": "slow", "baseModel": MODEL,
            "config": {"dataset": "d", "maxSeqLength": 128, "seed": 3, "packing": False,  # two rows an update
                       "hyperparams": {"training": {"maxSteps": steps, "batchSize": 2}}},
            "execution": {"saveEvery": 1, "resumableSaveEvery": 3}}


def kinds(client: httpx.Client, run_id: str) -> list[tuple[int, tuple[str, ...]]]:
    snapshots = client.get(f"/v1/training/runs/{run_id}/snapshots").json()["snapshots"]
    return [(s["step"], tuple(s["kinds"])) for s in snapshots]


def test_a_run_that_saves_faster_than_it_uploads_keeps_up_and_stays_resumable(slow, capsys, tmp_path):
    proc, client = slow
    cli = Cli(capsys, proc.url)
    lines = cli.ok("training", "runs", "start", "-f", write_plan(tmp_path, plan(60)), "--force", "--wait", "--events",
                   "-o", "json-compact").out.splitlines()
    run = json.loads(lines[-1])
    assert run["phase"] == "COMPLETED", run["failureReason"]
    saved = kinds(client, run["runId"])
    weights_only = [step for step, k in saved if k == ("weights",)]
    resumable = [step for step, k in saved if "trainingState" in k]
    assert weights_only, saved  # saves with newer ones behind them uploaded only their adapter
    assert saved[-1] == (60, ("weights", "trainingState"))  # the newest, final save in full
    assert len(resumable) >= 3, saved  # training state kept landing while the uploads lagged
    assert max(waiting for line in lines if (waiting := json.loads(line)["progress"].get("savesWaiting"))) > 1
    skipped = run["progress"]["savesSkipped"]
    assert skipped > 0 and run["progress"]["savesWaiting"] == 0
    assert len(saved) + skipped == 60  # every save was uploaded (whole or weights only) or skipped, none lost
    text = cli.ok("training", "runs", "get", run["runId"]).out
    assert f"{skipped} skipped" in text


def test_a_latest_pause_resumes_from_the_newest_save_with_training_state(slow, capsys, tmp_path):
    proc, client = slow
    cli = Cli(capsys, proc.url)
    run_id = cli.json("training", "runs", "start", "-f", write_plan(tmp_path, plan(400)), "--force")["runId"]
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:  # until a resumable save and a newer weights-only one are committed
        saved = kinds(client, run_id)
        resumable = [step for step, k in saved if "trainingState" in k]
        if resumable and any(k == ("weights",) and step > resumable[-1] for step, k in saved):
            break
        time.sleep(0.2)
    pause_url = f"/v1/training/runs/{run_id}/pause"
    accepted = client.post(pause_url, json={"checkpoint": "latest"})
    assert accepted.status_code == 202 and accepted.json()["phase"] == "PAUSING", accepted.text
    # asked again while it pauses (its newest save still uploading whole): the same pause is answered, another is
    # refused
    again = cli("training", "runs", "pause", run_id, "--checkpoint", "latest")
    assert again.code == 0 and "is already pausing (--checkpoint latest)" in again.out
    assert client.post(pause_url, json={"checkpoint": "latest"}).status_code == 200
    other = client.post(pause_url, json={"checkpoint": "save"})
    assert other.status_code == 409 and "already pausing with --checkpoint latest" in other.json()["detail"]
    paused = json.loads(cli.ok("training", "runs", "wait", run_id, "-o", "json-compact").out.splitlines()[-1])
    assert paused["phase"] == "PAUSED"
    saved = kinds(client, run_id)
    newest_resumable = max(step for step, k in saved if "trainingState" in k)
    assert paused["pause"]["savedStep"] == newest_resumable
    # the newest save is uploaded whole when the run stops, so it may be the update the run stopped after
    assert paused["pause"]["stoppedAtStep"] >= newest_resumable
    assert any(k == ("weights",) for _, k in saved)
    resumed = client.post(f"/v1/training/runs/{run_id}/resume").json()
    assert resumed["resumed"]["step"] == newest_resumable and resumed["resumed"]["optimizerState"]
    metrics = client.get(f"/v1/training/runs/{run_id}/metrics").json()["steps"]
    assert max(m["step"] for m in metrics) <= newest_resumable  # the discarded updates' metrics went with them
    client.post(f"/v1/training/runs/{run_id}/cancel").raise_for_status()
