"""`akka server start --mlflow URI`: every run's metrics forwarded to a real MLflow tracking server (`mlflow server`
on a SQLite store, started here on 127.0.0.1), read back with MLflow's own client. One MLflow run per Optimize run,
with the loss and learning rate of every step as the API answers them, the resolved settings as params, the end
status; a run paused and resumed is still one MLflow run; a branch's is tagged with its parent."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from tests.conftest import start_server
from tests.run_fixtures import capitals_project
from tests.tracker_runs import api_metrics, free_port, short_plan, wait_run

pytest.importorskip("mlflow")
pytest.importorskip("flask")
from mlflow.entities import ViewType  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    log = (folder / "mlflow.log").open("wb")
    mlflow = Path(sys.executable).parent / "mlflow"
    process = subprocess.Popen([str(mlflow), "server", "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}",
                                "--default-artifact-root", str(folder / "artifacts"), "--host", "127.0.0.1",
                                "--port", str(port), "--workers", "1"], stdout=log, stderr=subprocess.STDOUT,
                               # no job consumer (MLflow's GenAI jobs): a third of the start, and its huey package
                               env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
    yield {"uri": f"http://127.0.0.1:{port}", "process": process, "log": folder / "mlflow.log"}
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()


def wait_healthy(mlflow_server, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert mlflow_server["process"].poll() is None, mlflow_server["log"].read_text()[-2000:]
        try:
            if httpx.get(f"{mlflow_server['uri']}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"mlflow server did not start: {mlflow_server['log'].read_text()[-2000:]}")


@pytest.fixture(scope="module")
def forwarding(mlflow_server, tmp_path_factory):
    """An Optimize server forwarding to the MLflow server (started meanwhile), and a project of capitals on it."""
    server = start_server(tmp_path_factory.mktemp("server-mlflow"), env={"OPTIMIZE_MLFLOW_SWEEP_SECONDS": "0.5"},
                          extra_args=["--mlflow", mlflow_server["uri"]])
    project = capitals_project(server.url, tmp_path_factory.mktemp("mlflow-project"), "ml")
    wait_healthy(mlflow_server)
    started = {"server": server, "project": project, "mlflow": MlflowClient(tracking_uri=mlflow_server["uri"])}
    yield started
    started["server"].stop()  # the one the tests left running


def mlflow_runs(forwarding, run_id: str) -> list:
    experiment = forwarding["mlflow"].get_experiment_by_name(f"optimize/{forwarding['project']['name']}")
    if experiment is None:
        return []
    return forwarding["mlflow"].search_runs([experiment.experiment_id], f"tags.`optimize.run_id` = '{run_id}'",
                                            run_view_type=ViewType.ALL)


def wait_mlflow(forwarding, run_id: str, test, timeout: float = 30):
    deadline = time.monotonic() + timeout
    found = []
    while time.monotonic() < deadline:
        found = mlflow_runs(forwarding, run_id)
        if found and test(found[0]):
            return found
        time.sleep(0.2)
    raise AssertionError(f"MLflow's run of {run_id} did not get there: {found and found[0].info}")


def history(forwarding, mlflow_id: str, key: str) -> list[tuple[int, float]]:
    points = forwarding["mlflow"].get_metric_history(mlflow_id, key)
    return sorted((p.step, p.value) for p in points)


def test_a_run_is_one_mlflow_run_with_its_metrics_params_and_end_status(forwarding):
    client, name = forwarding["project"]["client"], forwarding["project"]["name"]
    run_id = client.post("/v1/training/runs", json=short_plan(name, 6)).json()["runId"]
    done = wait_run(client, run_id, lambda r: r["phase"] == "COMPLETED")

    (found,) = wait_mlflow(forwarding, run_id, lambda r: r.info.status == "FINISHED")
    steps = api_metrics(forwarding["project"]["client"], run_id)["steps"]
    assert [m["step"] for m in steps] == list(range(1, 7))
    assert history(forwarding, found.info.run_id, "loss") == [(m["step"], m["loss"]) for m in steps]
    assert history(forwarding, found.info.run_id, "learning_rate") == [(m["step"], m["learningRate"]) for m in steps]
    assert history(forwarding, found.info.run_id, "grad_norm") == [(m["step"], m["gradNorm"]) for m in steps]
    tags, params = found.data.tags, found.data.params
    assert tags["optimize.project"] == name and tags["optimize.method"] == "sft"
    assert tags["optimize.phase"] == "COMPLETED" and tags["optimize.sent.train"] == "1:6"
    assert params["config.hyperparams.training.maxSteps"] == "6"
    assert params["config.hyperparams.optimizer.learningRate"] == "0.01"
    assert params["execution.deviceProfile"] == "cpu"
    assert found.info.run_name.endswith(run_id[:12])
    assert found.info.end_time == pytest.approx(
        datetime.fromisoformat(done["timing"]["finishedAt"].replace("Z", "+00:00")).timestamp() * 1000, abs=1)

    # a branch of it: its own MLflow run, nested under its parent's
    branch = client.post(f"/v1/training/runs/{run_id}/branch",
                         json={"restoreMode": "weights", "maxSteps": 2})
    assert branch.status_code in (200, 201, 202), branch.text
    branch_id = branch.json()["runId"]
    wait_run(client, branch_id, lambda r: r["phase"] == "COMPLETED")
    (child,) = wait_mlflow(forwarding, branch_id, lambda r: r.info.status == "FINISHED")
    assert child.data.tags["optimize.parent_run_id"] == run_id
    assert child.data.tags["mlflow.parentRunId"] == found.info.run_id
    assert history(forwarding, child.info.run_id, "loss") == \
        [(m["step"], m["loss"]) for m in api_metrics(forwarding["project"]["client"], branch_id)["steps"]]


def test_a_paused_and_resumed_run_is_still_one_mlflow_run(forwarding, mlflow_server):
    client, name = forwarding["project"]["client"], forwarding["project"]["name"]
    run_id = client.post("/v1/training/runs", json=short_plan(name, 8)).json()["runId"]
    wait_run(client, run_id, lambda r: r["phase"] in ("PREPARING", "TRAINING"))
    assert client.post(f"/v1/training/runs/{run_id}/pause", json={"checkpoint": "save"}).status_code == 202
    paused = wait_run(client, run_id, lambda r: r["phase"] == "PAUSED")
    stopped = paused["pause"]["stoppedAtStep"]
    assert 1 <= stopped < 8
    (first,) = wait_mlflow(forwarding, run_id, lambda r: r.data.tags.get("optimize.phase") == "PAUSED")
    assert first.info.status == "RUNNING" and first.data.tags["optimize.sent.train"] == f"1:{stopped}"

    # a server started again knows nothing of what the last one sent but what the MLflow run's tags say
    old = forwarding["server"]
    old.stop()
    server = start_server(old.data_dir, env={"OPTIMIZE_MLFLOW_SWEEP_SECONDS": "0.5"},
                          extra_args=["--mlflow", mlflow_server["uri"]])
    client = httpx.Client(base_url=server.url, headers=server.headers, timeout=600)
    forwarding["server"], forwarding["project"]["client"] = server, client

    assert client.post(f"/v1/training/runs/{run_id}/resume").status_code in (200, 202)
    done = wait_run(client, run_id, lambda r: r["phase"] == "COMPLETED")
    assert done["attempt"] == 2
    (found,) = wait_mlflow(forwarding, run_id, lambda r: r.info.status == "FINISHED")
    assert found.info.run_id == first.info.run_id
    steps = api_metrics(forwarding["project"]["client"], run_id)["steps"]
    assert [m["step"] for m in steps] == list(range(1, 9))
    assert {m["attempt"] for m in steps} == {1, 2}
    assert history(forwarding, found.info.run_id, "loss") == [(m["step"], m["loss"]) for m in steps]
    assert found.data.tags["optimize.sent.train"] == "2:8"


def test_training_goes_on_without_mlflow_and_a_server_started_again_catches_up(mlflow_server, tmp_path_factory):
    folder = tmp_path_factory.mktemp("server-mlflow-down")
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    server = start_server(folder, env={"OPTIMIZE_MLFLOW_SWEEP_SECONDS": "0.5"}, extra_args=["--mlflow", down])
    try:
        project = capitals_project(server.url, tmp_path_factory.mktemp("mlflow-down-project"), "md")
        run_id = project["client"].post("/v1/training/runs", json=short_plan(project["name"], 4)).json()["runId"]
        wait_run(project["client"], run_id, lambda r: r["phase"] == "COMPLETED")
        said = f"forwarding run {run_id[:12]} to MLflow at {down} failed"
        deadline = time.monotonic() + 30  # the sweeper's first try may come after a short run completed
        while said not in server.log.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert said in server.log.read_text()
    finally:
        server.stop()

    wait_healthy(mlflow_server)
    server = start_server(folder, env={"OPTIMIZE_MLFLOW_SWEEP_SECONDS": "0.5"},
                          extra_args=["--mlflow", mlflow_server["uri"]])
    try:
        again = {"project": {**project, "client": httpx.Client(base_url=server.url, headers=server.headers)},
                 "mlflow": MlflowClient(tracking_uri=mlflow_server["uri"])}
        (found,) = wait_mlflow(again, run_id, lambda r: r.info.status == "FINISHED")
        assert history(again, found.info.run_id, "loss") == \
            [(m["step"], m["loss"]) for m in api_metrics(again["project"]["client"], run_id)["steps"]]
    finally:
        server.stop()
