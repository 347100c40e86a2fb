"""Pause, resume and cancel through the CLI and the API against a real server, real workers and real TRL
training on CPU: a seeded run paused twice (with a save, then against its latest save) and resumed ends with the
same adapter weights as the same run uninterrupted."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.conftest import Cli
from tests.run_fixtures import capitals_project, followed, plan, wait_for, write_plan

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def project(sqlite_server, tmp_path_factory):
    return capitals_project(sqlite_server.url, tmp_path_factory.mktemp("lifecycle"), "l", copies=3)


def seeded_plan(name: str, steps: int = 30) -> dict:
    document = plan(name, "chat")
    document["config"]["seed"] = 11
    document["config"]["hyperparams"]["training"]["maxSteps"] = steps
    document["execution"]["saveEvery"] = 10
    return document


def wait_until(client: httpx.Client, run_id: str, test, timeout: float = 180) -> dict:
    return wait_for(client, f"/v1/training/runs/{run_id}", test, timeout, fail_if=lambda run: run["terminal"])


def start(cli: Cli, project, document: dict) -> str:
    path = write_plan(project["tmp"], document)
    return cli.json("training", "runs", "start", "-f", path, "--force")["runId"]


def test_a_paused_and_resumed_run_ends_with_the_uninterrupted_weights(project, sqlite_server, capsys):
    cli, client = Cli(capsys, sqlite_server.url), project["client"]
    baseline = followed(cli, "training", "runs", "start", "-f",
                        write_plan(project["tmp"], seeded_plan(project["name"])), "--force", "--wait")
    assert baseline["phase"] == "COMPLETED", baseline["failureReason"]

    run_id = start(cli, project, seeded_plan(project["name"]))
    wait_until(client, run_id, lambda r: r["phase"] == "PREPARING")
    pause_url = f"/v1/training/runs/{run_id}/pause"

    # latest needs a save holding training state; this run has none yet
    refused = client.post(pause_url, json={"checkpoint": "latest"})
    assert refused.status_code == 400, refused.text
    assert "has no save with its training state yet" in refused.json()["detail"]
    assert "--checkpoint save" in refused.json()["hint"]
    assert client.post(pause_url, json={"checkpoint": "soon"}).status_code == 422

    # (a pause asked again while the run pauses is answered in test_save_uploads.py, whose slow uploads keep a run
    # pausing for a while; this stand-in pauses too fast to ask twice on a fast machine)
    accepted = client.post(pause_url, json={"checkpoint": "save"})
    assert accepted.status_code == 202 and accepted.json()["phase"] == "PAUSING"

    paused = followed(cli, "training", "runs", "wait", run_id)  # follows until the run has paused
    assert paused["phase"] == "PAUSED" and paused["execution"]["devicesHeld"] == []
    pause = paused["pause"]
    assert pause["checkpoint"] == "save" and pause["resourcesReleased"] and "saveFailed" not in pause
    assert pause["savedStep"] == pause["stoppedAtStep"] >= 1  # saved at the update it stopped after
    assert paused["savedStep"] == pause["savedStep"]
    text = cli.ok("training", "runs", "get", run_id).out
    assert f"paused after step {pause['stoppedAtStep']} (--checkpoint save) against snapshot" in text

    already = client.post(pause_url, json={"checkpoint": "save"})
    assert already.status_code == 400 and already.json()["phase"] == "PAUSED"
    assert "resume the run to train it again" in already.json()["hint"]
    refused = cli("training", "runs", "pause", run_id, "--checkpoint", "latest")
    assert refused.code == 1 and "is PAUSED" in refused.err

    resumed = cli.ok("training", "runs", "resume", run_id)
    assert (f"queued as attempt 2; it restored snapshot {pause['snapshotId'][:12]} at step {pause['savedStep']} "
            "with its optimizer state") in resumed.out
    assert client.post(f"/v1/training/runs/{run_id}/resume").status_code == 400  # no longer paused

    # the new attempt shows its own state: preparing, no step of the first attempt, no pause
    second = wait_until(client, run_id, lambda r: r["attempt"] == 2 and r["phase"] == "PREPARING")
    assert second["pause"] is None and "observedStep" not in second["progress"]
    assert second["resumed"]["afterPause"]["stoppedAtStep"] == pause["stoppedAtStep"]
    accepted = cli.ok("training", "runs", "pause", run_id, "--checkpoint", "latest")
    assert "against its newest save with training state" in accepted.out
    paused = wait_until(client, run_id, lambda r: r["phase"] == "PAUSED")
    snapshots = cli.json("training", "runs", "snapshots", run_id)["snapshots"]
    resumable = [s for s in snapshots if "trainingState" in s["kinds"]]
    newest = max(resumable, key=lambda s: (s["step"], s["attempt"]))
    assert paused["pause"]["checkpoint"] == "latest" and paused["pause"]["snapshotId"] == newest["snapshotId"]
    assert paused["pause"]["savedStep"] == newest["step"]

    third = cli.json("training", "runs", "resume", run_id)
    assert third["resumed"] | {"attempt": 3, "snapshotId": newest["snapshotId"], "optimizerState": True} == \
        third["resumed"]
    lines = cli.ok("training", "runs", "wait", run_id, "--events", "-o", "json-compact").out.splitlines()
    done = json.loads(lines[-1])
    assert done["phase"] == "COMPLETED", done["failureReason"]
    assert not any(json.loads(line).get("pause") for line in lines)  # the earlier pauses are not repeated
    assert done["attempt"] == 3 and done["pause"] is None
    text = cli.ok("training", "runs", "get", run_id).out
    assert f"Resumed      attempt 3 restored snapshot {newest['snapshotId'][:12]} at step {newest['step']}" in text

    # exactly the weights of the uninterrupted run, as runs get and the registry show them
    assert done["results"]["weightsDigest"] == baseline["results"]["weightsDigest"]
    model = cli.json("registry", "models", "get", done["results"]["model"])
    assert model["servingModel"]["weightsDigest"] == baseline["results"]["weightsDigest"]
    steps = [m["step"] for m in cli.json("training", "runs", "metrics", run_id)["steps"]]
    assert steps == list(range(1, 31))  # every update once: those after a restored save were trained again
    ours = {m["step"]: m["loss"] for m in cli.json("training", "runs", "metrics", run_id)["steps"]}
    theirs = {m["step"]: m["loss"] for m in cli.json("training", "runs", "metrics", baseline["runId"])["steps"]}
    assert ours == theirs
    # the results cover every update the run kept, not only its last attempt's
    assert done["results"]["trainingLoss"] == baseline["results"]["trainingLoss"]


def test_cancel_ends_a_run_in_any_unfinished_phase_and_frees_its_devices(project, sqlite_server, capsys):
    cli, client = Cli(capsys, sqlite_server.url), project["client"]
    running = start(cli, project, seeded_plan(project["name"], steps=5000))
    wait_until(client, running, lambda r: r["phase"] in ("PREPARING", "TRAINING"))
    waiting = start(cli, project, seeded_plan(project["name"], steps=5000))  # the only cpu device is held
    assert client.get(f"/v1/training/runs/{waiting}").json()["phase"] == "QUEUED"
    refused = client.post(f"/v1/training/runs/{waiting}/pause", json={"checkpoint": "save"})
    assert refused.status_code == 400 and "cancel it with" in refused.json()["hint"]

    unconfirmed = cli("training", "runs", "cancel", waiting)
    assert unconfirmed.code == 1 and "pass --force" in unconfirmed.err
    cancelled = cli.ok("training", "runs", "cancel", waiting, "--force")
    assert "cancelled; its devices are released" in cancelled.out
    assert client.get(f"/v1/training/runs/{waiting}").json()["phase"] == "CANCELLED"

    answer = client.post(f"/v1/training/runs/{running}/cancel")
    assert answer.status_code == 202 and answer.json()["phase"] == "CANCELLED"
    assert answer.json()["execution"]["devicesHeld"] == []
    again = cli.ok("training", "runs", "cancel", running, "--force")
    assert "was already cancelled" in again.out
    assert client.post(f"/v1/training/runs/{running}/cancel").status_code == 200
    claims = client.get("/v1/training/capacity").json()["claims"]
    assert not [c for c in claims if c["for"] in (running, waiting)], claims

    for verb, body in (("pause", {"checkpoint": "save"}), ("resume", None)):
        refused = client.post(f"/v1/training/runs/{running}/{verb}", json=body)
        assert refused.status_code == 400 and refused.json()["phase"] == "CANCELLED"


def test_a_completed_run_cannot_be_cancelled_paused_or_resumed(completed_run, capsys):
    cli, client = Cli(capsys, completed_run["url"]), completed_run["client"]
    done = client.get(f"/v1/training/runs/{completed_run['run']['runId']}").json()
    assert done["phase"] == "COMPLETED"
    refused = cli("training", "runs", "cancel", done["runId"], "--force")
    assert refused.code == 1 and "is COMPLETED; there is nothing to cancel" in refused.err
    paused = client.post(f"/v1/training/runs/{done['runId']}/pause", json={"checkpoint": "latest"})
    assert paused.status_code == 400 and "only a preparing or training run can be paused" in paused.json()["detail"]
    resumed = cli("training", "runs", "resume", done["runId"])
    assert resumed.code == 1 and "only a paused run can be resumed" in resumed.err
