"""`akka server start --wandb offline --wandb-dir DIR`: every run's metrics forwarded to Weights & Biases through its
own client, offline (no W&B server can be run here: online is not tested), read back from the offline run files with
W&B's own record type. One W&B run per Optimize run, with its id, the loss and learning rate of every step as the API
answers them at `train/global_step`, the resolved settings as config, its exit code; a branch in its parent's group; a
run paused, the server started again and the run resumed is still one offline folder, holding every step once; W&B's
service process stops with the server; a bad `--wandb` (or a sweep interval that is no number of seconds) is
refused in one line."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import start_server
from tests.run_fixtures import capitals_project
from tests.tracker_runs import api_metrics, read_wandb_run, short_plan, wait_run, wandb_services

pytest.importorskip("wandb")

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def wandb_env(folder: Path) -> dict[str, str]:
    """Nothing of W&B's may reach a network or the user's home: offline everywhere, its config and caches here."""
    return {"OPTIMIZE_WANDB_SWEEP_SECONDS": "0.5", "WANDB_MODE": "offline", "WANDB_ERROR_REPORTING": "false",
            "WANDB_CONFIG_DIR": str(folder / "config"), "WANDB_CACHE_DIR": str(folder / "cache"),
            "WANDB_DATA_DIR": str(folder / "data"), "WANDB_API_KEY": ""}


def start(data_dir: Path, wandb_dir: Path):
    return start_server(data_dir, env=wandb_env(wandb_dir.parent),
                        extra_args=["--wandb", "offline", "--wandb-dir", str(wandb_dir)])


@pytest.fixture(scope="module")
def forwarding(tmp_path_factory):
    """An Optimize server forwarding to W&B offline, and a project of capitals on it."""
    root = tmp_path_factory.mktemp("wandb")
    server = start(root / "server", root / "runs")
    project = capitals_project(server.url, tmp_path_factory.mktemp("wandb-project"), "wb")
    started = {"server": server, "project": project, "dir": root / "runs", "root": root}
    yield started
    started["server"].stop()  # the one the tests left running
    assert wandb_services(started["server"].process.pid) == []


def folders(forwarding, run_id: str) -> list[Path]:
    return sorted((forwarding["dir"] / "wandb").glob(f"offline-run-*-{run_id}*"))


def wait_ended(forwarding, run_id: str, timeout: float = 30) -> dict:
    """The run's one offline folder, read back, once the forwarder has finished the W&B run."""
    ended = forwarding["dir"] / "wandb" / "optimize-ended" / "offline" / run_id
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not ended.exists():
        time.sleep(0.2)
    assert ended.exists(), forwarding["server"].log.read_text()[-3000:]
    (folder,) = folders(forwarding, run_id)
    return read_wandb_run(folder)


def train_rows(found: dict) -> list[dict]:
    return [row for row in found["history"] if "train/loss" in row]


def test_a_run_is_one_wandb_run_with_its_metrics_config_and_exit_code(forwarding):
    client, name = forwarding["project"]["client"], forwarding["project"]["name"]
    run_id = client.post("/v1/training/runs", json=short_plan(name, 6)).json()["runId"]
    wait_run(client, run_id, lambda r: r["phase"] == "COMPLETED")
    assert wandb_services(forwarding["server"].process.pid)  # W&B's service runs beside the server

    found = wait_ended(forwarding, run_id)
    steps = api_metrics(client, run_id)["steps"]
    assert [m["step"] for m in steps] == list(range(1, 7))
    rows = train_rows(found)
    assert [row["train/global_step"] for row in rows] == [m["step"] for m in steps]
    assert [row["train/loss"] for row in rows] == [m["loss"] for m in steps]
    assert [row["train/learning_rate"] for row in rows] == [m["learningRate"] for m in steps]
    assert [row["train/grad_norm"] for row in rows] == [m["gradNorm"] for m in steps]
    assert [row["_step"] for row in found["history"]] == list(range(len(found["history"])))  # W&B's own step
    run = found["run"]
    assert run.run_id == run_id and run.display_name.endswith(run_id[:12])
    assert run.project == f"optimize-{name}" and run.run_group == run_id[:12] and run.job_type == "sft"
    config = found["config"]
    assert config["config"]["hyperparams"]["training"]["maxSteps"] == 6
    assert config["config"]["hyperparams"]["optimizer"]["learningRate"] == 0.01
    assert config["execution"]["deviceProfile"] == "cpu"
    assert config["optimize"]["run_id"] == run_id and config["optimize"]["method"] == "sft"
    assert config["optimize"]["project"] == name and "parent_run_id" not in config["optimize"]
    assert found["summary"]["optimize.phase"] == "COMPLETED" and found["summary"]["optimize.sent.train"] == "1:6"
    assert found["exit_code"] == 0

    # a branch of it: its own W&B run, in its parent's group
    branch = client.post(f"/v1/training/runs/{run_id}/branch", json={"restoreMode": "weights", "maxSteps": 2})
    assert branch.status_code in (200, 201, 202), branch.text
    branch_id = branch.json()["runId"]
    wait_run(client, branch_id, lambda r: r["phase"] == "COMPLETED")
    child = wait_ended(forwarding, branch_id)
    assert child["run"].run_id == branch_id and child["run"].run_group == run_id[:12]
    assert child["config"]["optimize"]["parent_run_id"] == run_id
    assert [(row["train/global_step"], row["train/loss"]) for row in train_rows(child)] == \
        [(m["step"], m["loss"]) for m in api_metrics(client, branch_id)["steps"]]
    assert child["exit_code"] == 0
    assert "Traceback" not in forwarding["server"].log.read_text()


def test_a_paused_run_resumed_after_a_restart_is_one_offline_folder_with_every_step_once(forwarding):
    client, name = forwarding["project"]["client"], forwarding["project"]["name"]
    run_id = client.post("/v1/training/runs", json=short_plan(name, 8)).json()["runId"]
    wait_run(client, run_id, lambda r: r["phase"] in ("PREPARING", "TRAINING"))
    assert client.post(f"/v1/training/runs/{run_id}/pause", json={"checkpoint": "save"}).status_code == 202
    stopped = wait_run(client, run_id, lambda r: r["phase"] == "PAUSED")["pause"]["stoppedAtStep"]
    assert 1 <= stopped < 8
    deadline = time.monotonic() + 30  # the forwarder has sent the pause (W&B writes its file as it goes)
    while time.monotonic() < deadline and not (
            folders(forwarding, run_id)
            and read_wandb_run(folders(forwarding, run_id)[0])["summary"].get("optimize.phase") == "PAUSED"):
        time.sleep(0.2)
    (first,) = folders(forwarding, run_id)

    # the server stops: the open W&B run is finished and W&B's service goes with it
    old = forwarding["server"]
    old.stop()
    assert wandb_services(old.process.pid) == []
    paused = read_wandb_run(first)
    assert paused["exit_code"] == 0 and paused["summary"]["optimize.phase"] == "PAUSED"
    assert [row["train/global_step"] for row in train_rows(paused)] == list(range(1, stopped + 1))

    # a server started again writes the run again, from the store, in one new folder
    server = start(old.data_dir, forwarding["dir"])
    client = httpx.Client(base_url=server.url, headers=server.headers, timeout=600)
    forwarding["server"], forwarding["project"]["client"] = server, client
    assert client.post(f"/v1/training/runs/{run_id}/resume").status_code in (200, 202)
    done = wait_run(client, run_id, lambda r: r["phase"] == "COMPLETED")
    assert done["attempt"] == 2
    found = wait_ended(forwarding, run_id)
    assert not first.exists()
    steps = api_metrics(client, run_id)["steps"]
    assert [m["step"] for m in steps] == list(range(1, 9)) and {m["attempt"] for m in steps} == {1, 2}
    assert [(row["train/global_step"], row["train/loss"]) for row in train_rows(found)] == \
        [(m["step"], m["loss"]) for m in steps]
    assert found["run"].run_id == run_id and found["exit_code"] == 0
    assert found["summary"]["optimize.sent.train"] == "2:8"


@pytest.mark.parametrize(("args", "extra", "expected"), [
    (["--wandb", "sometimes"], {}, "error: --wandb 'sometimes' is not offline or online"),
    (["--wandb", "offline", "--wandb-dir", "/proc/optimize-wandb"], {},
     "error: --wandb-dir /proc/optimize-wandb: cannot"),
    (["--wandb", "offline"], {"OPTIMIZE_WANDB_SWEEP_SECONDS": "soon"},
     "error: OPTIMIZE_WANDB_SWEEP_SECONDS is 'soon', not a number of seconds above 0"),
    (["--mlflow", "http://127.0.0.1:9"], {"OPTIMIZE_MLFLOW_SWEEP_SECONDS": "0"},
     "error: OPTIMIZE_MLFLOW_SWEEP_SECONDS is '0', not a number of seconds above 0"),
])
def test_a_bad_tracker_setting_is_refused_in_one_line(tmp_path, args, extra, expected):
    done = subprocess.run([sys.executable, "-m", "optimize", "server", "start", "--port", "0", "--data-dir",
                           str(tmp_path), *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **wandb_env(tmp_path), **extra})
    assert done.returncode == (2 if extra else 1)  # a malformed setting is a usage error; a flag is refused
    assert done.stderr.splitlines()[0].startswith(expected), done.stderr
    assert "Traceback" not in done.stderr + done.stdout and not (tmp_path / "server.json").exists()
    assert "Optimize server on" not in done.stdout
