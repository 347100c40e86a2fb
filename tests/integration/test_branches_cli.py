"""Branches through the CLI and API: `--restore auto` choosing trainingState or weights with its reason, a weights
branch training on from its parent's adapter, `continue` keeping the optimizer with a schedule of its own, sweeps
validated point by point before any is submitted, and the family views (branches, tree, ancestry)."""

from __future__ import annotations

import uuid

import pytest
import yaml

from tests.conftest import Cli
from tests.run_fixtures import capitals_project, followed, plan

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def parent(sqlite_server, tmp_path_factory):
    made = capitals_project(sqlite_server.url, tmp_path_factory.mktemp("branches"), "br")
    name, client, tmp = made["name"], made["client"], made["tmp"]
    document = plan(name, "chat")
    document["config"]["hyperparams"]["training"]["maxSteps"] = 12
    document["execution"]["saveEvery"] = 4
    run = client.post("/v1/training/runs", json=document).json()
    with client.stream("GET", f"/v1/training/runs/{run['runId']}/events") as stream:
        for _ in stream.iter_lines():
            pass
    run = client.get(f"/v1/training/runs/{run['runId']}").json()
    assert run["phase"] == "COMPLETED", run["failureReason"]
    return {"client": client, "run": run, "project": name, "tmp": tmp}


def overrides_file(parent, document: dict) -> str:
    path = parent["tmp"] / f"o-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump(document))
    return str(path)


def test_restore_auto_keeps_the_optimizer_where_it_can_and_says_why(parent, sqlite_server, capsys):
    cli, client = Cli(capsys, sqlite_server.url), parent["client"]
    run_id = parent["run"]["runId"]
    before = len(client.get("/v1/training/runs", params={"project": parent["project"]}).json()["runs"])

    lr_only = overrides_file(parent, {"hyperparams": {"optimizer": {"learningRate": 0.005}}})
    dry = cli.json("training", "runs", "branch", run_id, "--overrides", lr_only, "--dry-run")
    assert dry["dryRun"] and dry["branch"]["restore"] == "trainingState"
    assert dry["branch"]["why"].startswith("auto: the snapshot holds its training state")
    assert dry["branch"]["step"] == 12  # the newest snapshot
    text = cli.ok("training", "runs", "branch", run_id, "--overrides", lr_only, "--dry-run").out
    assert "Restore      restores trainingState from snapshot" in text and "nothing was started" in text

    batch = overrides_file(parent, {"hyperparams": {"training": {"batchSize": 2}}})
    dry = cli.json("training", "runs", "branch", run_id, "--overrides", batch, "--dry-run")
    assert dry["branch"]["restore"] == "weights"
    assert "the overrides change hyperparams.training.batchSize" in dry["branch"]["why"]
    refused = cli("training", "runs", "branch", run_id, "--overrides", batch, "--restore", "trainingState")
    assert refused.code == 1 and "a trainingState branch cannot start here" in refused.err
    assert "accepts only the learning rate and the validation frequency" in refused.err

    lora = overrides_file(parent, {"hyperparams": {"lora": {"rank": 16}}})
    refused = cli("training", "runs", "branch", run_id, "--overrides", lora)
    assert refused.code == 1 and "keeps its LoRA settings" in refused.err
    unknown = client.post(f"/v1/training/runs/{run_id}/branch", json={"overrides": {"hyperparams": {"lr": 1}}})
    assert unknown.status_code == 422 and "config.hyperparams.lr: unknown field" in unknown.json()["detail"]
    assert client.post(f"/v1/training/runs/{run_id}/branch", json={"restore": "x"}).status_code == 422
    snapshots = client.get(f"/v1/training/runs/{run_id}/snapshots").json()["snapshots"]
    early = client.post(f"/v1/training/runs/{run_id}/branch?dryRun=true",
                        json={"snapshotId": snapshots[0]["snapshotId"]}).json()  # no restoreMode: auto
    assert early["branch"]["restore"] == "trainingState" and early["branch"]["step"] == 4
    after = len(client.get("/v1/training/runs", params={"project": parent["project"]}).json()["runs"])
    assert after == before  # dry runs and refusals started nothing


def test_a_weights_branch_trains_on_from_its_parents_adapter(parent, sqlite_server, capsys):
    cli = Cli(capsys, sqlite_server.url)
    run_id = parent["run"]["runId"]
    batch = overrides_file(parent, {"hyperparams": {"training": {"batchSize": 2}}})
    child = followed(cli, "training", "runs", "branch", run_id, "--overrides", batch, "--max-steps", "4", "--wait")
    assert child["phase"] == "COMPLETED", child["failureReason"]
    assert child["parentRunId"] == run_id and child["branch"]["restore"] == "weights"
    steps = cli.json("training", "runs", "metrics", child["runId"])["steps"]
    assert [m["step"] for m in steps] == [1, 2, 3, 4]  # it counts its own updates
    first_parent = cli.json("training", "runs", "metrics", run_id)["steps"][0]["loss"]
    assert steps[0]["loss"] < first_parent - 0.5  # it starts from the trained adapter, not the base model
    text = cli.ok("training", "runs", "get", child["runId"]).out
    assert "Restore      weights from snapshot" in text
    assert f"of run {run_id[:12]} (auto: the overrides change hyperparams.training.batchSize" in text
    assert child["results"]["model"] == f"{parent['project']}/tiny-llama-3.2:v2"


def test_continue_keeps_the_optimizer_on_a_schedule_of_its_own(parent, sqlite_server, capsys):
    cli = Cli(capsys, sqlite_server.url)
    run_id = parent["run"]["runId"]
    lr = overrides_file(parent, {"hyperparams": {"optimizer": {"learningRate": 0.004}}})
    child = followed(cli, "training", "runs", "continue", run_id, "--steps", "5", "--overrides", lr, "--wait")
    assert child["phase"] == "COMPLETED", child["failureReason"]
    assert child["branch"]["restore"] == "trainingState" and child["branch"]["step"] == 12
    steps = cli.json("training", "runs", "metrics", child["runId"])["steps"]
    assert [m["step"] for m in steps] == [1, 2, 3, 4, 5]
    # linear decay over its own 5 updates at its own learning rate (the parent's schedule had ended at 0)
    assert [m["learningRate"] for m in steps] == pytest.approx([0.004 * (5 - k) / 5 for k in range(5)])
    parent_losses = [m["loss"] for m in cli.json("training", "runs", "metrics", run_id)["steps"]]
    assert steps[0]["loss"] < parent_losses[0] - 0.5
    snapshots = cli.json("training", "runs", "snapshots", child["runId"])["snapshots"]
    assert [s["step"] for s in snapshots] == [4, 5]  # saves on its own count (saveEvery 4), then the final

    refused = cli("training", "runs", "continue", run_id, "--steps", "3", "--overrides",
                  overrides_file(parent, {"maxSeqLength": 128}))
    assert refused.code == 1 and "the overrides change maxSeqLength" in refused.err

    family = cli.json("training", "runs", "branches", run_id)["runs"]
    assert child["runId"] in [r["runId"] for r in family] and all(r["depth"] == 1 for r in family)
    grandchild = followed(cli, "training", "runs", "branch", child["runId"], "--restore", "weights", "--max-steps",
                          "2", "--wait")
    tree = cli.json("training", "runs", "tree", run_id)["runs"]
    assert {(r["runId"], r["depth"]) for r in tree} >= {(child["runId"], 1), (grandchild["runId"], 2)}
    chain = cli.json("training", "runs", "ancestry", grandchild["runId"])["chain"]
    assert [hop["runId"] for hop in chain] == [run_id, child["runId"], grandchild["runId"]]
    assert chain[1]["fromStep"] == 12 and chain[1]["restore"] == "trainingState" and chain[1]["steps"] == 5
    text = cli.ok("training", "runs", "ancestry", grandchild["runId"]).out
    assert "(root)" in text and f"← snapshot {chain[2]['snapshotId'][:12]} at step 5 (weights)" in text


def test_a_sweep_checks_every_point_before_it_submits_any(parent, sqlite_server, capsys):
    cli, client = Cli(capsys, sqlite_server.url), parent["client"]
    run_id = parent["run"]["runId"]
    before = len(client.get("/v1/training/runs", params={"project": parent["project"]}).json()["runs"])
    grid = parent["tmp"] / "grid.yaml"
    grid.write_text(yaml.safe_dump({"axes": [
        {"path": "hyperparams.optimizer.learningRate", "values": [0.01, 0.002]},
        {"path": "hyperparams.training.batchSize", "values": [4, 2]}]}))
    dry = cli.json("training", "runs", "sweep", run_id, "--grid", str(grid), "--dry-run")
    points = [(p["overrides"]["hyperparams"]["optimizer"]["learningRate"],
               p["overrides"]["hyperparams"]["training"]["batchSize"], p["restore"]) for p in dry["points"]]
    # last axis fastest; each point chooses its restore on its own
    assert points == [(0.01, 4, "weights"), (0.01, 2, "weights"), (0.002, 4, "weights"), (0.002, 2, "weights")]

    lr_grid = parent["tmp"] / "lr.yaml"
    lr_grid.write_text(yaml.safe_dump({"axes": [{"path": "hyperparams.optimizer.learningRate",
                                                 "values": [0.01, 0.002]}]}))
    dry = cli.json("training", "runs", "sweep", run_id, "--grid", str(lr_grid), "--dry-run")
    assert [p["restore"] for p in dry["points"]] == ["trainingState", "trainingState"]

    bad = parent["tmp"] / "bad.yaml"
    bad.write_text(yaml.safe_dump({"axes": [{"path": "hyperparams.optimizer.learningRate", "values": [0.01]},
                                            {"path": "hyperparams.lora.rank", "values": [8, 16]}]}))
    refused = cli("training", "runs", "sweep", run_id, "--grid", str(bad))
    assert refused.code == 1 and "sweep point 1 (hyperparams.optimizer.learningRate=0.01, hyperparams.lora.rank=8)" \
        in refused.err
    nested = parent["tmp"] / "nested.yaml"
    nested.write_text(yaml.safe_dump({"axes": [{"path": "hyperparams.optimizer", "values": [{}]},
                                               {"path": "hyperparams.optimizer.learningRate", "values": [0.1]}]}))
    refused = cli("training", "runs", "sweep", run_id, "--grid", str(nested))
    assert refused.code == 1 and "name the same or nested paths" in refused.err
    after = len(client.get("/v1/training/runs", params={"project": parent["project"]}).json()["runs"])
    assert after == before

    submitted = cli.json("training", "runs", "sweep", run_id, "--grid", str(lr_grid))["runs"]
    assert len(submitted) == 2 and all(r["parentRunId"] == run_id for r in submitted)
    for run in submitted:
        client.post(f"/v1/training/runs/{run['runId']}/cancel").raise_for_status()
