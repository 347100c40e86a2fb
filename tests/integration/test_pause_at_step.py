"""`execution.pauseAtStep` against a real server, real workers and real TRL training on CPU: the run saves with its
training state at that update and pauses there (asked by the plan); resumed, it does not pause there again and
ends with the same adapter weights and per-update losses as the same run without the pause."""

from __future__ import annotations

import json

import pytest

from tests.conftest import Cli
from tests.run_fixtures import capitals_project, followed, plan, write_plan

pytestmark = pytest.mark.integration


def seeded_plan(name: str, **execution) -> dict:
    document = plan(name, "chat")
    document["config"]["seed"] = 11
    document["config"]["hyperparams"]["training"]["maxSteps"] = 6
    document["execution"] = {"deviceProfile": "cpu", **execution}
    return document


def test_a_run_pauses_at_its_plan_s_step_and_resumes_to_the_unpaused_weights(sqlite_server, tmp_path, capsys):
    project = capitals_project(sqlite_server.url, tmp_path, "pa")
    cli, name = Cli(capsys, sqlite_server.url), project["name"]

    never = cli("training", "runs", "start", "-f", write_plan(tmp_path, seeded_plan(name, pauseAtStep=6)), "--force")
    assert never.code == 1, never.out
    assert ("execution.pauseAtStep 6 is at or after this run's last update: it makes 6 updates, so it would never "
            "pause") in never.err
    assert "set execution.pauseAtStep below 6 (1 to 5), or remove it" in never.err

    baseline = followed(cli, "training", "runs", "start", "-f", write_plan(tmp_path, seeded_plan(name)), "--force",
                        "--wait")
    assert baseline["phase"] == "COMPLETED", baseline["failureReason"]

    paused = followed(cli, "training", "runs", "start", "-f", write_plan(tmp_path, seeded_plan(name, pauseAtStep=3)),
                      "--force", "--wait")  # follows until the run has paused
    run_id = paused["runId"]
    assert paused["phase"] == "PAUSED" and paused["execution"]["devicesHeld"] == [], paused["failureReason"]
    pause = paused["pause"]
    assert pause["askedBy"] == "plan" and pause["checkpoint"] == "save" and pause["requestedAtStep"] == 3
    assert pause["stoppedAtStep"] == pause["savedStep"] == paused["savedStep"] == 3
    assert pause["resourcesReleased"] and "saveFailed" not in pause
    snapshots = cli.json("training", "runs", "snapshots", run_id)["snapshots"]
    at_three = [s for s in snapshots if s["step"] == 3]
    assert len(at_three) == 1 and "trainingState" in at_three[0]["kinds"]
    assert pause["snapshotId"] == at_three[0]["snapshotId"]
    settings = cli.json("training", "runs", "get", run_id, "--settings")["settings"]
    assert settings["execution.pauseAtStep"] == {"value": 3, "source": "stated"}
    text = cli.ok("training", "runs", "get", run_id).out
    assert "paused after step 3 (execution.pauseAtStep 3) against snapshot" in text

    cli.ok("training", "runs", "resume", run_id)
    lines = cli.ok("training", "runs", "wait", run_id, "--events", "-o", "json-compact").out.splitlines()
    done = json.loads(lines[-1])
    assert done["phase"] == "COMPLETED", done["failureReason"]
    assert not any(json.loads(line).get("pause") for line in lines)  # it does not pause at step 3 again
    assert done["attempt"] == 2 and done["resumed"]["step"] == 3 and done["resumed"]["optimizerState"]
    assert done["resumed"]["afterPause"]["askedBy"] == "plan"

    # exactly the weights and losses of the run without the pause
    assert done["results"]["weightsDigest"] == baseline["results"]["weightsDigest"]
    ours = {m["step"]: m["loss"] for m in cli.json("training", "runs", "metrics", run_id)["steps"]}
    theirs = {m["step"]: m["loss"] for m in cli.json("training", "runs", "metrics", baseline["runId"])["steps"]}
    assert list(ours) == list(range(1, 7)) and ours == theirs
