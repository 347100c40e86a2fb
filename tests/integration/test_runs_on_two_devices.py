"""Supervised and preference runs on two devices of one node, on the cpu with the gloo backend (a server whose cpu
profile has two slots): a run with `execution.gpus: 2` trains data-parallel in two processes — rank 0 the worker,
rank 1 following its decisions — and its loss matches the one-process run with the same global batch; paused and
resumed on two processes it ends with the weights of the uninterrupted two-process run; a dpo run on two devices
completes; a trainingState branch of a two-device run trains on two devices from its save. With
`execution.sharding: fsdp` the two processes shard the model (FSDP2 over gloo): the loss is the data-parallel run's,
and paused and resumed (its optimizer saved as a sharded run saves it) it ends with its uninterrupted weights."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.conftest import catalog_with_devices, start_server
from tests.run_fixtures import capitals_project, plan, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("two-devices")
    catalog = catalog_with_devices(tmp, [{"name": "cpu", "kind": "cpu", "devices": 2}])
    proc = start_server(tmp / "data", extra_args=["--catalog", str(catalog)])
    project = capitals_project(proc.url, tmp, "dp", copies=4)
    yield project
    proc.stop()


def seeded(project: str, devices: int, batch: int, steps: int = 20) -> dict:
    document = plan(project, "chat")
    document["config"]["seed"] = 5
    document["config"]["hyperparams"]["training"] = {"maxSteps": steps, "batchSize": batch}
    document["execution"] |= {"gpus": devices, "saveEvery": 4, "resumableSaveEvery": 1}
    return document


def wait(client: httpx.Client, run_id: str, test) -> dict:
    return wait_for(client, f"/v1/training/runs/{run_id}", test)


def trained(client: httpx.Client, document: dict) -> dict:
    run = client.post("/v1/training/runs", json=document).json()
    assert "runId" in run, run
    done = wait(client, run["runId"], lambda r: r["terminal"])
    assert done["phase"] == "COMPLETED", done["failureReason"]
    return done


@pytest.fixture(scope="module")
def two(deployment) -> dict:
    """The seeded run on two devices (batch 2 on each), uninterrupted."""
    return trained(deployment["client"], seeded(deployment["name"], 2, 2))


def test_a_run_on_two_devices_trains_as_one_device_does_with_the_same_global_batch(deployment, two):
    client = deployment["client"]
    one = trained(client, seeded(deployment["name"], 1, 4))
    logs = client.get(f"/v1/training/runs/{two['runId']}/logs", params={"attempt": 1}).json()["text"]
    assert "rank 1 trained its share" in logs, logs[-2000:]
    mean_one = one["results"]["trainingLoss"]["mean"]
    mean_two = two["results"]["trainingLoss"]["mean"]
    assert abs(mean_two - mean_one) / mean_one < 0.1, (mean_one, mean_two)  # other rows per update, same batch
    assert two["results"]["steps"] == one["results"]["steps"] == 20


def test_a_run_on_two_devices_paused_and_resumed_ends_with_the_uninterrupted_weights(deployment, two):
    client = deployment["client"]
    document = seeded(deployment["name"], 2, 2)
    # paused by the plan at update 8, as a pause with a save asked there would: every rank stops at that boundary
    # (a pause asked over the API could arrive after the run's last update on a loaded machine)
    document["execution"]["pauseAtStep"] = 8
    run = client.post("/v1/training/runs", json=document).json()
    paused = wait(client, run["runId"], lambda r: r["phase"] == "PAUSED")
    assert paused["progress"]["savedStep"] == 8
    client.post(f"/v1/training/runs/{run['runId']}/resume").raise_for_status()
    done = wait(client, run["runId"], lambda r: r["terminal"])
    assert done["phase"] == "COMPLETED" and done["attempt"] == 2, done["failureReason"]
    assert done["results"]["weightsDigest"] == two["results"]["weightsDigest"]


def test_a_dpo_run_on_two_devices_completes_with_its_preference_results(deployment, tmp_path):
    from optimize.cli.main import main
    from tests.conftest import pair_row, write_jsonl
    from tests.run_fixtures import CAPITALS, MODEL

    client, name = deployment["client"], deployment["name"]
    pairs = [pair_row(f"Capital of {country}?", city, "I do not know.") for country, city in CAPITALS] * 2
    assert main(["registry", "datasets", "register", f"{name}/prefs", "-f", str(write_jsonl(tmp_path / "p.jsonl",
                 pairs)), "--server", str(client.base_url)]) == 0
    done = trained(client, {"kind": "run", "project": name, "baseModel": MODEL, "modelName": "preferred",
                            "config": {"method": "dpo", "dataset": "prefs", "maxSeqLength": 128, "seed": 5,
                                       "hyperparams": {"optimizer": {"learningRate": 0.01},
                                                       "training": {"maxSteps": 4, "batchSize": 2}}},
                            "execution": {"deviceProfile": "cpu", "gpus": 2}})
    assert done["method"] == "dpo" and done["results"]["steps"] == 4
    assert "accuracy" in done["results"]["preference"]
    logs = client.get(f"/v1/training/runs/{done['runId']}/logs", params={"attempt": 1}).json()["text"]
    assert "rank 1 trained its share" in logs


def test_a_branch_of_a_two_device_run_trains_on_two_devices_from_its_save(deployment, two):
    client = deployment["client"]
    snapshots = client.get(f"/v1/training/runs/{two['runId']}/snapshots").json()["snapshots"]
    middle = next(s for s in snapshots if s["step"] == 8)
    branch = client.post(f"/v1/training/runs/{two['runId']}/branch", json={
        "snapshotId": middle["snapshotId"], "overrides": {"hyperparams": {"optimizer": {"learningRate": 0.005}}}})
    assert branch.status_code == 202, branch.text
    child = branch.json()
    done = wait(client, child["runId"], lambda r: r["terminal"])
    assert done["phase"] == "COMPLETED", done["failureReason"]
    assert done["branch"]["restore"] == "trainingState" and done["branch"]["step"] == 8
    logs = client.get(f"/v1/training/runs/{done['runId']}/logs", params={"attempt": 1}).json()["text"]
    assert "rank 1 trained its share" in logs


@pytest.fixture(scope="module")
def sharded(deployment) -> dict:
    """The seeded run on two devices with its weights, adapter and optimizer state sharded (fsdp), uninterrupted."""
    document = seeded(deployment["name"], 2, 2)
    document["execution"]["sharding"] = "fsdp"
    return trained(deployment["client"], document)


def test_a_sharded_run_trains_as_the_data_parallel_one_does(deployment, two, sharded):
    client = deployment["client"]
    logs = client.get(f"/v1/training/runs/{sharded['runId']}/logs", params={"attempt": 1}).json()["text"]
    units = re.search(r"sharding: fsdp, (\d+) FSDP units over 2 devices", logs)
    assert units and int(units.group(1)) >= 3, logs[-2000:]  # its decoder layers, the embedding, the model
    assert "rank 1 trained its share" in logs
    assert sharded["execution"]["sharding"] == "fsdp" and two["execution"]["sharding"] == "ddp"
    settings = client.get(f"/v1/training/runs/{two['runId']}", params={"settings": "true"}).json()["settings"]
    assert settings["execution.sharding"] == {"value": "ddp", "source": "default"}
    mean_ddp = two["results"]["trainingLoss"]["mean"]
    mean_fsdp = sharded["results"]["trainingLoss"]["mean"]
    assert abs(mean_fsdp - mean_ddp) / mean_ddp < 0.02, (mean_ddp, mean_fsdp)  # the same rows, the same updates
    assert sharded["results"]["steps"] == 20 and sharded["checks"]["status"] == "passed"


def test_a_sharded_run_paused_and_resumed_ends_with_the_uninterrupted_weights(deployment, sharded):
    client = deployment["client"]
    document = seeded(deployment["name"], 2, 2)
    document["execution"]["sharding"] = "fsdp"
    run = client.post("/v1/training/runs", json=document).json()
    wait(client, run["runId"], lambda r: (r["progress"].get("savedStep") or 0) >= 4)
    client.post(f"/v1/training/runs/{run['runId']}/pause", json={"checkpoint": "save"}).raise_for_status()
    paused = wait(client, run["runId"], lambda r: r["phase"] == "PAUSED")
    assert paused["progress"]["savedStep"] < 20
    snapshots = client.get(f"/v1/training/runs/{run['runId']}/snapshots").json()["snapshots"]
    state = [a for s in snapshots for a in s["artifacts"] if a["kind"] == "trainingState"]
    assert state, snapshots
    client.post(f"/v1/training/runs/{run['runId']}/resume").raise_for_status()
    done = wait(client, run["runId"], lambda r: r["terminal"])
    assert done["phase"] == "COMPLETED" and done["attempt"] == 2, done["failureReason"]
    assert done["results"]["weightsDigest"] == sharded["results"]["weightsDigest"]
