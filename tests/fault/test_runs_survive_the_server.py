"""Runs survive the server: a server stopped (SIGTERM) or killed (kill -9) mid-run and started again on another
port leaves the run's worker training through the outage (its metrics buffered, its saves retried); the new server
reattaches it and the run completes as attempt 1 with every metric and the weights of the uninterrupted run. When
the worker dies with the server, the next server queues the run again from its newest save holding training
state, and it completes with the same weights — a pipeline's train stage too, the pipeline then going on to its
next stage."""

from __future__ import annotations

import time

import httpx
import psutil
import pytest

from tests.conftest import start_server
from tests.run_fixtures import capitals_project, plan

pytestmark = [pytest.mark.fault, pytest.mark.integration]


def seeded(project: str) -> dict:
    document = plan(project, "chat")
    document["config"]["seed"] = 11
    document["config"]["hyperparams"]["training"]["maxSteps"] = 40
    document["execution"] |= {"saveEvery": 5, "resumableSaveEvery": 1}
    return document


def wait(client: httpx.Client, run_id: str, test, timeout: float = 240) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = client.get(f"/v1/training/runs/{run_id}").json()
        if test(run):
            return run
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} did not get there: {run['phase']} {run.get('failureReason')}")


def losses(client: httpx.Client, run_id: str) -> dict[int, float]:
    return {m["step"]: m["loss"] for m in client.get(f"/v1/training/runs/{run_id}/metrics").json()["steps"]}


def run_worker(run_id: str) -> psutil.Process:
    [found] = [p for p in psutil.process_iter(["cmdline"]) if run_id in (p.info.get("cmdline") or [])]
    return found


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """A server of its own (these tests stop it), a project, and the run uninterrupted as the reference."""
    data_dir = tmp_path_factory.mktemp("restarts") / "server"
    holder = {"proc": start_server(data_dir)}
    project = capitals_project(holder["proc"].url, data_dir.parent, "r", copies=3)
    client = project["client"]
    baseline = client.post("/v1/training/runs", json=seeded(project["name"])).json()
    baseline = wait(client, baseline["runId"], lambda r: r["terminal"])
    assert baseline["phase"] == "COMPLETED", baseline["failureReason"]
    holder.update(project=project, data_dir=data_dir, baseline=baseline,
                  losses=losses(client, baseline["runId"]))
    yield holder
    holder["proc"].stop()


def restart(deployment, how: str) -> httpx.Client:
    old = deployment["proc"]
    old.stop() if how == "sigterm" else old.kill9()
    time.sleep(2)  # an outage: the worker trains on, keeping what it cannot send
    deployment["proc"] = start_server(deployment["data_dir"])
    assert deployment["proc"].url != old.url or how == "sigterm"
    return httpx.Client(base_url=deployment["proc"].url, headers=deployment["proc"].headers, timeout=600)


@pytest.mark.parametrize("how", ["sigterm", "kill9"])
def test_a_run_trains_through_a_server_restart_and_completes_as_if_uninterrupted(deployment, how):
    client = httpx.Client(base_url=deployment["proc"].url, headers=deployment["proc"].headers, timeout=600)
    run = client.post("/v1/training/runs", json=seeded(deployment["project"]["name"])).json()
    # as soon as it trains: on an idle machine the stand-in's 40 updates take three seconds, and its first progress
    # report may come after the last of them
    wait(client, run["runId"], lambda r: r["phase"] == "TRAINING", timeout=60)
    worker = run_worker(run["runId"])
    client = restart(deployment, how)
    assert worker.is_running()  # the server's end is not its worker's
    done = wait(client, run["runId"], lambda r: r["terminal"])
    assert done["phase"] == "COMPLETED", done["failureReason"]
    assert done["attempt"] == 1 and done["resumed"] is None  # reattached, never tried again
    assert done["results"]["weightsDigest"] == deployment["baseline"]["results"]["weightsDigest"]
    assert losses(client, run["runId"]) == deployment["losses"]  # every metric, none lost in the outage
    snapshots = client.get(f"/v1/training/runs/{run['runId']}/snapshots").json()["snapshots"]
    assert max(s["step"] for s in snapshots) == 40


def test_a_run_whose_worker_died_with_the_server_is_queued_again_and_completes(deployment):
    client = httpx.Client(base_url=deployment["proc"].url, headers=deployment["proc"].headers, timeout=600)
    run = client.post("/v1/training/runs", json=seeded(deployment["project"]["name"])).json()
    wait(client, run["runId"], lambda r: (r["progress"].get("savedStep") or 0) >= 10)
    worker = run_worker(run["runId"])
    deployment["proc"].kill9()
    worker.kill()  # both die
    worker.wait(10)
    deployment["proc"] = start_server(deployment["data_dir"])
    client = httpx.Client(base_url=deployment["proc"].url, headers=deployment["proc"].headers, timeout=600)
    requeued = wait(client, run["runId"], lambda r: r["attempt"] == 2)
    assert requeued["resumed"]["afterLoss"] == "worker lost: it ended with the previous server process"
    assert requeued["resumed"]["optimizerState"] is True and requeued["resumed"]["step"] >= 10
    done = wait(client, run["runId"], lambda r: r["terminal"])
    assert done["phase"] == "COMPLETED", done["failureReason"]
    assert done["attempt"] == 2
    assert done["results"]["weightsDigest"] == deployment["baseline"]["results"]["weightsDigest"]
    assert losses(client, run["runId"]) == deployment["losses"]


def test_a_pipeline_killed_mid_train_resumes_its_train_stage_and_completes_with_the_uninterrupted_weights(
        deployment):
    """Server and worker killed while a pipeline's train stage trains: the next server queues the stage's run again
    from its newest save, the pipeline goes on to its evaluate stage, and the run ends with the weights of the run
    trained without a break."""
    client = httpx.Client(base_url=deployment["proc"].url, headers=deployment["proc"].headers, timeout=600)
    name = deployment["project"]["name"]
    run_plan = seeded(name)
    stages = [{"name": "train", "type": "train", "baseModel": run_plan["baseModel"], "config": run_plan["config"],
               "execution": run_plan["execution"]},
              {"name": "check", "type": "evaluate", "model": "@train", "dataset": f"{name}/chat",
               "grader": "contains", "maxNewTokens": 2}]
    started = client.post("/v1/training/pipelines", json={"kind": "pipeline", "project": name, "stages": stages})
    assert started.status_code == 202, started.text
    pipeline_id = started.json()["pipelineId"]
    deadline = time.monotonic() + 120
    while not (stage := client.get(f"/v1/training/pipelines/{pipeline_id}").json()["stages"][0])["jobId"]:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    run_id = stage["jobId"]
    wait(client, run_id, lambda r: (r["progress"].get("savedStep") or 0) >= 10)
    worker = run_worker(run_id)
    deployment["proc"].kill9()
    worker.kill()
    worker.wait(10)
    deployment["proc"] = start_server(deployment["data_dir"])
    client = httpx.Client(base_url=deployment["proc"].url, headers=deployment["proc"].headers, timeout=600)
    deadline = time.monotonic() + 300
    while not (piped := client.get(f"/v1/training/pipelines/{pipeline_id}").json())["terminal"]:
        assert time.monotonic() < deadline, piped
        time.sleep(0.2)
    assert piped["phase"] == "COMPLETED", piped
    assert [s["jobId"] for s in piped["stages"]][0] == run_id and piped["stages"][0]["attempt"] == 1
    run = client.get(f"/v1/training/runs/{run_id}").json()
    assert run["attempt"] == 2 and run["pipeline"] == {"pipelineId": pipeline_id, "stage": "train"}
    assert run["results"]["weightsDigest"] == deployment["baseline"]["results"]["weightsDigest"]
