"""Runs survive process faults: a killed or frozen worker ends its attempt as lost within its lease and releases
its devices (killed first: no device is granted while it may still run), the run is tried again from its newest
resumable save within `execution.maxAttempts`, and waiting work that the devices can no longer hold after a
restart fails with the reason while a running worker carries on with the new server."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx
import psutil
import pytest
import yaml

from tests.conftest import chat_row, from_standin, start_server, write_jsonl

pytestmark = [pytest.mark.fault, pytest.mark.integration]
MODEL = "optimize/tiny-llama-3.2"
LEASE = "4"


def workers(run_id: str, timeout: float = 15.0) -> list[psutil.Process]:
    """The run's worker processes, waiting (up to `timeout`) for one to show: a warm-started worker takes its
    command line over from the process it forked from a moment after the run moves on, later on a loaded machine."""
    deadline = time.monotonic() + timeout
    while True:
        found = []
        for process in psutil.process_iter(["cmdline"]):
            cmdline = process.info.get("cmdline") or []
            if "optimize.worker" in cmdline and run_id in cmdline:
                found.append(process)
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def setup(client: httpx.Client, tmp_path: Path, project: str = "faults") -> None:
    client.post(f"/v1/training/base-models/{MODEL}/select", json=from_standin(MODEL)).raise_for_status()
    rows = write_jsonl(tmp_path / "d.jsonl", [chat_row(f"question {i}", f"answer {i}") for i in range(16)])
    from optimize.cli.main import main

    assert main(["registry", "datasets", "register", f"{project}/d", "-f", str(rows),
                 "--server", str(client.base_url)]) == 0
    client.post("/v1/training/projects", json={"name": project}).raise_for_status()


def long_plan(project: str = "faults", gpus: int = 1, steps: int = 5000, profile: str = "cpu",
              attempts: int = 3) -> dict:
    return {"kind": "run", "project": project, "baseModel": MODEL,
            "config": {"dataset": "d", "maxSeqLength": 128,
                       "hyperparams": {"training": {"maxSteps": steps, "batchSize": 2}}},
            "execution": {"deviceProfile": profile, "gpus": gpus, "maxAttempts": attempts}}


def wait_for(client: httpx.Client, run_id: str, phases: set[str], timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = client.get(f"/v1/training/runs/{run_id}").json()
        if run["phase"] in phases:
            return run
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} stayed {run['phase']}, not {phases}")


def tried_again(client: httpx.Client, run_id: str) -> dict:
    """The run training again as attempt 2 after its worker was killed."""
    deadline = time.monotonic() + float(LEASE) + 60
    again = client.get(f"/v1/training/runs/{run_id}").json()
    while not (again["attempt"] == 2 and again["phase"] == "TRAINING") and time.monotonic() < deadline:
        time.sleep(0.2)
        again = client.get(f"/v1/training/runs/{run_id}").json()
    assert again["attempt"] == 2 and again["phase"] == "TRAINING", again
    assert again["resumed"]["afterLoss"].startswith("worker lost: its process was killed by signal 9 (SIGKILL)")
    return again


@pytest.fixture(scope="module")
def short_lease_server(tmp_path_factory):
    """One server with a short lease for the module's lost-worker tests (a server start each is seconds): each
    test works on runs of its own, and ends them (completed, failed or cancelled) with their devices released."""
    tmp_path = tmp_path_factory.mktemp("lease")
    proc = start_server(tmp_path / "server", env={"OPTIMIZE_LEASE_SECONDS": LEASE})
    client = httpx.Client(base_url=proc.url, headers=proc.headers, timeout=600)
    setup(client, tmp_path)
    yield proc, client
    proc.stop()


@pytest.fixture
def lease_server(short_lease_server):
    proc, client = short_lease_server
    yield proc, client
    # a test that failed midway leaves no run holding the device the next test's runs need
    for run in client.get("/v1/training/runs", params={"project": "faults"}).json()["runs"]:
        if not run["terminal"]:
            client.post(f"/v1/training/runs/{run['runId']}/cancel")


def test_a_killed_worker_is_tried_again_until_its_attempts_run_out_then_frees_its_devices(lease_server):
    proc, client = lease_server
    run = client.post("/v1/training/runs", json=long_plan(attempts=2)).json()
    wait_for(client, run["runId"], {"TRAINING"})
    [worker] = workers(run["runId"])
    environment = worker.environ()
    assert environment["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert environment["CUDA_VISIBLE_DEVICES"] == ""  # a cpu slot: no GPU is handed over
    # a worker's malformed reports are refused, and leave the run as it was
    lease = {"X-Lease-Token": environment["OPTIMIZE_LEASE_TOKEN"]}
    shard = client.get("/v1/registry/datasets/faults/d").json()["objects"][0]["digest"].removeprefix("sha256:")
    for body, words in (({"artifacts": []}, "needs its step"),
                        ({"step": 1, "artifacts": [{"kind": "weights", "manifestSha256": shard}]},
                         "is not a snapshot manifest"),
                        ({"step": 1, "artifacts": [{"kind": "nonsense"}]}, "is not one of weights, trainingState")):
        refused = client.post(f"/v1/internal/jobs/run/{run['runId']}/snapshots", json=body, headers=lease)
        assert refused.status_code == 422 and words in refused.json()["detail"], refused.text
    assert client.get(f"/v1/training/runs/{run['runId']}/snapshots").json()["snapshots"] == []
    assert client.get(f"/v1/training/runs/{run['runId']}").json()["phase"] == "TRAINING"
    worker.kill()  # the first loss: tried again as attempt 2, from the start (it saved nothing yet)
    again = tried_again(client, run["runId"])
    assert again["resumed"]["snapshotId"] is None and again["execution"]["maxAttempts"] == 2
    [worker] = workers(run["runId"])
    killed_at = time.monotonic()
    worker.kill()  # the second loss uses up its attempts
    failed = wait_for(client, run["runId"], {"FAILED"}, timeout=float(LEASE) + 10)
    assert time.monotonic() - killed_at < float(LEASE) + 5
    assert failed["failureReason"].startswith("worker lost: its process was killed by signal 9 (SIGKILL)")
    assert "(attempt 2 of 2; no attempts left)" in failed["failureReason"]
    capacity = client.get("/v1/training/capacity").json()
    assert capacity["claims"] == [] and all(not d["held"] for d in capacity["devices"])
    # the freed device takes the next run
    second = client.post("/v1/training/runs", json=long_plan(steps=2)).json()
    assert wait_for(client, second["runId"], {"COMPLETED", "FAILED"})["phase"] == "COMPLETED"


def test_a_worker_lost_while_pausing_leaves_the_run_paused_with_the_reason(lease_server, capsys):
    proc, client = lease_server
    run = client.post("/v1/training/runs", json=long_plan()).json()
    wait_for(client, run["runId"], {"PREPARING"})
    [worker] = workers(run["runId"])  # started: it imports and reads its rows before its first update
    assert client.post(f"/v1/training/runs/{run['runId']}/pause", json={"checkpoint": "save"}).status_code == 202
    worker.kill()
    paused = wait_for(client, run["runId"], {"PAUSED", "FAILED"}, timeout=float(LEASE) + 10)
    assert paused["phase"] == "PAUSED", paused["failureReason"]
    pause = paused["pause"]
    assert pause["endReason"].startswith("worker lost: its process was killed by signal 9")
    assert pause["saveFailed"] == "the worker stopped before it saved" and pause["snapshotId"] is None
    assert pause["resourcesReleased"] and client.get("/v1/training/capacity").json()["claims"] == []
    # nothing to restore: the resumed attempt says so, and cancelling it leaves the earlier pause as it ended
    from optimize.cli.main import main

    capsys.readouterr()
    assert main(["training", "runs", "resume", run["runId"], "--server", proc.url]) == 0
    assert "queued as attempt 2; it restored none; starts from the base model" in capsys.readouterr().out
    resumed = client.get(f"/v1/training/runs/{run['runId']}").json()
    assert resumed["resumed"]["snapshotId"] is None and resumed["resumed"]["afterPause"] == pause
    wait_for(client, run["runId"], {"PREPARING", "TRAINING"})
    assert main(["training", "runs", "cancel", run["runId"], "--force", "--server", proc.url]) == 0
    cancelled = client.get(f"/v1/training/runs/{run['runId']}").json()
    assert cancelled["phase"] == "CANCELLED" and cancelled["resumed"]["afterPause"] == pause
    assert cancelled["attempt"] == 2
    assert wait_gone(run["runId"])  # its worker was stopped


def wait_gone(run_id: str, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while workers(run_id, timeout=0) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not workers(run_id, timeout=0)


def test_a_worker_that_stops_heart_beating_is_lost_when_its_lease_runs_out(lease_server):
    proc, client = lease_server
    run = client.post("/v1/training/runs", json=long_plan(attempts=1)).json()
    wait_for(client, run["runId"], {"TRAINING"})
    [worker] = workers(run["runId"])
    worker.send_signal(signal.SIGSTOP)  # alive, but silent
    try:
        failed = wait_for(client, run["runId"], {"FAILED"}, timeout=float(LEASE) + 15)
        assert failed["failureReason"].startswith("worker lost: no heartbeat from its worker since")
        assert f"lease {LEASE}s" in failed["failureReason"]
        assert not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE  # killed before its devices went
    finally:
        if worker.is_running():
            worker.kill()
    assert client.get("/v1/training/capacity").json()["claims"] == []


def test_an_orphan_worker_never_shares_a_device_with_the_next_holder(lease_server):
    """A silent worker is killed, and confirmed gone, before its device is granted to the run's next attempt."""
    proc, client = lease_server
    run = client.post("/v1/training/runs", json=long_plan(attempts=2)).json()
    wait_for(client, run["runId"], {"TRAINING"})
    [orphan] = workers(run["runId"])
    orphan.send_signal(signal.SIGSTOP)  # it would train on if woken: only a kill makes the device free
    try:
        deadline = time.monotonic() + float(LEASE) + 60
        again = client.get(f"/v1/training/runs/{run['runId']}").json()
        while again["attempt"] < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
            again = client.get(f"/v1/training/runs/{run['runId']}").json()
        # the moment the next attempt holds the device, the orphan is gone (a zombie at most, never running)
        assert again["attempt"] == 2, again
        assert not orphan.is_running() or orphan.status() == psutil.STATUS_ZOMBIE
        assert again["resumed"]["afterLoss"].startswith("worker lost: no heartbeat from its worker since")
        wait_for(client, run["runId"], {"TRAINING"})
        assert [w.pid for w in workers(run["runId"])] != [orphan.pid]
    finally:
        if orphan.is_running():
            orphan.kill()
        client.post(f"/v1/training/runs/{run['runId']}/cancel")


def test_waiting_work_that_the_new_devices_cannot_hold_fails_after_a_restart(tmp_path):
    catalog = yaml.safe_load((Path(__file__).resolve().parents[2] / "catalogs" / "default.yaml").read_text())
    catalog["devices"] = [{"name": "cpu", "kind": "cpu", "devices": 2}, {"name": "spare", "kind": "cpu", "devices": 1}]
    two_profiles = tmp_path / "two-profiles.yaml"
    two_profiles.write_text(yaml.safe_dump(catalog))
    data_dir = tmp_path / "server"
    # the first run's worker waits out the restart within its lease: room for a slow start on a loaded machine
    lease = "12"
    proc = start_server(data_dir, env={"OPTIMIZE_LEASE_SECONDS": lease}, extra_args=["--catalog", str(two_profiles)])
    client = httpx.Client(base_url=proc.url, headers=proc.headers, timeout=600)
    setup(client, tmp_path)
    # the devices a profile has hold at submission: two cpu slots, not three
    refused = client.post("/v1/training/runs", json=long_plan(gpus=3))
    assert refused.status_code == 400, refused.text
    assert "execution.gpus 3 asks for more devices of profile 'cpu'" in refused.json()["detail"]
    assert refused.json()["hint"] == "set execution.gpus to 2 or fewer"
    first = client.post("/v1/training/runs", json=long_plan(profile="spare")).json()
    wait_for(client, first["runId"], {"PREPARING", "TRAINING"})
    waiting = client.post("/v1/training/runs", json=long_plan(profile="spare")).json()
    from optimize.cli.main import main

    started = time.monotonic()
    assert main(["training", "runs", "wait", waiting["runId"], "--timeout", "2", "--server", proc.url]) == 1
    assert time.monotonic() - started < 15  # a timeout gives up following; the run goes on
    # two seconds on, it still waits for devices
    assert client.get(f"/v1/training/runs/{waiting['runId']}").json()["phase"] == "QUEUED"
    claims = {c["for"]: c for c in client.get("/v1/training/capacity").json()["claims"]}
    assert claims[first["runId"]]["state"] == "GRANTED" and claims[waiting["runId"]]["state"] == "QUEUED"
    proc.kill9()
    restarted = start_server(data_dir, env={"OPTIMIZE_LEASE_SECONDS": lease})  # the shipped catalog: cpu only
    try:
        client = httpx.Client(base_url=restarted.url, headers=restarted.headers, timeout=600)
        failed = wait_for(client, waiting["runId"], {"FAILED"}, timeout=15)
        assert "no device of profile 'spare' exists on this deployment, so the run can never be scheduled; " \
               "profiles here: cpu (1 device)" in failed["failureReason"]
        # the first run's worker outlived the server: the new one (on another port) finds it and it trains on
        going = wait_for(client, first["runId"], {"TRAINING"}, timeout=15)
        assert going["attempt"] == 1
        step = going["progress"].get("observedStep") or 0
        deadline = time.monotonic() + float(lease) + 30
        while (client.get(f"/v1/training/runs/{first['runId']}").json()["progress"].get("observedStep") or 0) <= step:
            assert time.monotonic() < deadline, "the reattached worker reports no progress to the new server"
            time.sleep(0.5)
    finally:
        restarted.stop()
        for worker in workers(first["runId"]):
            worker.kill()


def test_a_stale_lease_is_refused_on_every_run_route(sqlite_server):
    """On the shared server: no run there holds the lease a worker sends."""
    for method, path in (("GET", ""), ("POST", "/heartbeat"), ("POST", "/progress"), ("POST", "/metrics"),
                         ("POST", "/snapshots"), ("POST", "/result")):
        response = httpx.request(method, f"{sqlite_server.url}/v1/internal/jobs/run/abc{path}",
                                 headers={"X-Lease-Token": "stale"}, json={} if method == "POST" else None)
        assert response.status_code == 409 and response.json()["code"] == "lease_lost", (path, response.text)


def shared_workers(run_ids: list[str], timeout: float = 15.0) -> list[psutil.Process]:
    """The worker processes serving any of the runs, one shared worker naming the others after `--shared-with`."""
    deadline = time.monotonic() + timeout
    while True:
        found = [process for process in psutil.process_iter(["cmdline"])
                 if "optimize.worker" in (process.info.get("cmdline") or [])
                 and any(run_id in part for part in process.info["cmdline"] for run_id in run_ids)]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def granted_together(client: httpx.Client, count: int) -> list[str]:
    """`count` runs sharing a base, queued behind a run holding the device, then granted it together once it is
    cancelled; their ids, training."""
    blocker = client.post("/v1/training/runs", json=long_plan()).json()["runId"]
    wait_for(client, blocker, {"TRAINING"})
    shared = []
    for _ in range(count):
        document = long_plan(attempts=3)
        document["execution"]["shareBase"] = True
        shared.append(client.post("/v1/training/runs", json=document).json()["runId"])
    client.post(f"/v1/training/runs/{blocker}/cancel").raise_for_status()
    for run_id in shared:
        wait_for(client, run_id, {"TRAINING"})
    return shared


def test_a_killed_shared_worker_loses_each_of_its_runs_and_they_train_together_again(lease_server):
    proc, client = lease_server
    shared = granted_together(client, 2)
    [worker] = shared_workers(shared)  # one process trains both
    worker.kill()
    for run_id in shared:
        tried_again(client, run_id)
    [again] = shared_workers(shared)  # requeued together, granted together again
    assert again.pid != worker.pid
    for run_id in shared:
        client.post(f"/v1/training/runs/{run_id}/cancel").raise_for_status()
    capacity = client.get("/v1/training/capacity").json()
    assert capacity["claims"] == [] and all(not d["held"] for d in capacity["devices"])


def test_cancelling_one_shared_run_leaves_the_others_training_on_the_device(lease_server):
    proc, client = lease_server
    first, second = granted_together(client, 2)
    [worker] = shared_workers([first, second])
    client.post(f"/v1/training/runs/{first}/cancel").raise_for_status()
    assert wait_for(client, first, {"CANCELLED"})["phase"] == "CANCELLED"
    time.sleep(float(LEASE) + 1)  # past the cancelled run's lease: nothing took the device or stopped the other
    assert worker.is_running() and client.get(f"/v1/training/runs/{second}").json()["phase"] == "TRAINING"
    [claim] = client.get("/v1/training/capacity").json()["claims"]
    assert claim["subject"] == f"run:{second}" and claim["state"] == "GRANTED"  # the hold passed to the one left
    step = client.get(f"/v1/training/runs/{second}").json()["progress"]["observedStep"]
    time.sleep(1)
    assert client.get(f"/v1/training/runs/{second}").json()["progress"]["observedStep"] > step
    client.post(f"/v1/training/runs/{second}/cancel").raise_for_status()
    wait_for(client, second, {"CANCELLED"})
    worker.wait(30)  # the last one's stop ends the process
    capacity = client.get("/v1/training/capacity").json()
    assert capacity["claims"] == [] and all(not d["held"] for d in capacity["devices"])
