"""Endpoint and evaluation faults against a real server: an endpoint waits for capacity while the device is held,
a lost worker fails its endpoint with the reason and frees the device for the one waiting, a project with an
endpoint serving cannot be archived, an idle endpoint is taken down; endpoints and running evaluations go on with
the next server process after the server stops (SIGTERM) or dies (kill -9)."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.conftest import Cli, from_standin

pytestmark = pytest.mark.integration
LLAMA, QWEN = "optimize/tiny-llama-3.2", "optimize/tiny-qwen2.5"


def _worker(endpoint_id: str):
    import psutil

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = [p for p in psutil.process_iter(["cmdline"]) if endpoint_id in (p.info.get("cmdline") or [])]
        if found:
            return found[0]
        time.sleep(0.1)
    raise AssertionError(f"no worker process for endpoint {endpoint_id}")


def test_a_lost_worker_fails_its_endpoint_and_frees_the_device_for_the_one_waiting(server_factory, capsys):
    proc = server_factory("endpoints")
    cli, client = Cli(capsys, proc.url), httpx.Client(base_url=proc.url, headers=proc.headers, timeout=300)
    for model in (LLAMA, QWEN):
        client.post(f"/v1/training/base-models/{model}/select", json=from_standin(model)).raise_for_status()
    client.post("/v1/training/projects", json={"name": "serve"}).raise_for_status()

    first = json.loads(cli.ok("training", "endpoints", "create", "--model", LLAMA, "--project", "serve", "--wait",
                              "--timeout", "300", "-o", "json-compact").out.splitlines()[-1])
    assert first["phase"] == "READY"
    # another base model needs a device of its own; the only cpu slot is held, so it waits
    second = cli.json("training", "endpoints", "create", "--model", QWEN, "--project", "serve")
    assert second["attached"] is False and second["phase"] == "AWAITING_CAPACITY"
    time.sleep(2)
    waiting = cli.json("training", "endpoints", "get", second["endpointId"])
    assert waiting["phase"] == "AWAITING_CAPACITY"  # it says what it waits for
    assert waiting["waitingFor"].startswith(f"waiting for the cpu device held by endpoint {first['endpointId'][:12]} "
                                            "(idle ")
    assert f"Waiting     waiting for the cpu device held by endpoint {first['endpointId'][:12]}" in cli(
        "training", "endpoints", "get", second["endpointId"]).out

    refused = cli("training", "projects", "archive", "serve")
    assert refused.code == 1 and f"endpoint {first['endpointId'][:12]} (READY)" in refused.err
    assert f"endpoint {second['endpointId'][:12]} (AWAITING_CAPACITY)" in refused.err

    worker = _worker(first["endpointId"])
    worker.kill()
    worker.wait(30)
    deadline = time.monotonic() + 30  # the server learns of the exit a moment after it happened
    while cli.json("training", "endpoints", "get", first["endpointId"])["phase"] == "READY":
        assert time.monotonic() < deadline, "the killed worker's endpoint stayed READY"
        time.sleep(0.1)
    waited = cli("training", "endpoints", "wait", first["endpointId"], "--timeout", "120")
    assert waited.code == 1  # an endpoint that will not answer is a failure
    failed = cli.json("training", "endpoints", "get", first["endpointId"])
    assert failed["phase"] == "FAILED" and failed["devicesHeld"] == []
    assert failed["failureReason"].startswith("worker lost: its process was killed by signal 9")
    answer = client.post("/v1/chat/completions", json={"model": LLAMA, "messages": [{"role": "user", "content": "hi"}]})
    assert answer.status_code == 404 and "is not served by any endpoint" in answer.json()["error"]["message"]

    ready = json.loads(cli.ok("training", "endpoints", "wait", second["endpointId"], "--timeout", "300",
                              "-o", "json-compact").out.splitlines()[-1])
    assert ready["phase"] == "READY" and ready["devicesHeld"] == ["cpu:serving:0"]  # the cpu's serving slot
    listed = cli.json("training", "endpoints", "list", "--project", "serve", "--phase", "active")["endpoints"]
    assert [e["endpointId"] for e in listed] == [second["endpointId"]]
    cli.ok("training", "endpoints", "delete", second["endpointId"])
    cli.ok("training", "projects", "archive", "serve")  # nothing in progress any more


def _ready(cli: Cli, endpoint_id: str) -> dict:
    return json.loads(cli.ok("training", "endpoints", "wait", endpoint_id, "--timeout", "300", "-o",
                             "json-compact").out.splitlines()[-1])


def test_an_endpoint_starts_again_once_with_each_next_server(server_factory, capsys):
    """One endpoint through two restarts: the server stopped (SIGTERM), then the next one killed (kill -9)."""
    proc = server_factory("restart")
    cli, client = Cli(capsys, proc.url), httpx.Client(base_url=proc.url, headers=proc.headers, timeout=300)
    client.post(f"/v1/training/base-models/{LLAMA}/select", json=from_standin(LLAMA)).raise_for_status()
    client.post("/v1/training/projects", json={"name": "again"}).raise_for_status()
    endpoint = cli.json("training", "endpoints", "create", "--model", LLAMA, "--project", "again")["endpointId"]
    assert _ready(cli, endpoint)["attempt"] == 1
    for attempt, stop in ((2, "sigterm"), (3, "kill9")):
        proc.stop() if stop == "sigterm" else proc.kill9()
        proc = server_factory("restart")  # the same data dir: the next server process
        cli, client = Cli(capsys, proc.url), httpx.Client(base_url=proc.url, headers=proc.headers, timeout=300)
        again = _ready(cli, endpoint)
        assert again["phase"] == "READY" and again["attempt"] == attempt and again["failureReason"] is None, stop
        answer = client.post("/v1/chat/completions", json={"model": LLAMA, "max_tokens": 4,
                                                           "messages": [{"role": "user", "content": "hi"}]})
        assert answer.status_code == 200 and answer.json()["model"] == LLAMA, stop
    cli.ok("training", "endpoints", "delete", endpoint)


def test_an_idle_endpoint_is_taken_down_and_frees_its_device(server_factory, capsys):
    proc = server_factory("idle", env={"OPTIMIZE_ENDPOINT_IDLE_SECONDS": "4"})
    cli, client = Cli(capsys, proc.url), httpx.Client(base_url=proc.url, headers=proc.headers, timeout=300)
    assert cli.json("training", "endpoints", "info")["idleTimeoutSeconds"] == 4
    client.post(f"/v1/training/base-models/{LLAMA}/select", json=from_standin(LLAMA)).raise_for_status()
    client.post("/v1/training/projects", json={"name": "idle"}).raise_for_status()
    endpoint = cli.json("training", "endpoints", "create", "--model", LLAMA, "--project", "idle")["endpointId"]
    assert _ready(cli, endpoint)["phase"] == "READY"
    answer = client.post("/v1/chat/completions", json={"model": LLAMA, "max_tokens": 2,
                                                       "messages": [{"role": "user", "content": "hi"}]})
    assert answer.status_code == 200
    assert cli.json("training", "endpoints", "get", endpoint)["lastRequestAt"] is not None
    deadline = time.monotonic() + 60
    while (item := cli.json("training", "endpoints", "get", endpoint))["phase"] == "READY":
        assert time.monotonic() < deadline, item
        time.sleep(0.5)
    assert item["phase"] == "DELETED" and item["devicesHeld"] == []
    assert item["failureReason"].startswith("taken down after 4 seconds without a request")
    assert not [c for c in client.get("/v1/training/capacity").json()["claims"] if c["for"] == endpoint]


def test_an_evaluation_goes_on_with_the_next_server(server_factory, capsys, tmp_path):
    """An evaluation stopped while it runs with the server (SIGTERM), then another killed with it (kill -9): each
    goes on with the next server process and completes on its second attempt."""
    from tests.conftest import chat_row, write_jsonl

    proc = server_factory("evaluate")
    cli, client = Cli(capsys, proc.url), httpx.Client(base_url=proc.url, headers=proc.headers, timeout=300)
    client.post(f"/v1/training/base-models/{LLAMA}/select", json=from_standin(LLAMA)).raise_for_status()
    client.post("/v1/training/projects", json={"name": "scores"}).raise_for_status()
    rows = [chat_row(f"Label ticket {i}", '{"label": "billing"}') for i in range(20)]
    cli.ok("registry", "datasets", "register", "scores/tickets", "-f", str(write_jsonl(tmp_path / "t.jsonl", rows)))
    for stop in ("sigterm", "kill9"):
        started = client.post("/v1/training/evaluations", json={"model": LLAMA, "dataset": "scores/tickets",
                                                                "project": "scores", "maxNewTokens": 200}).json()
        deadline = time.monotonic() + 120
        while client.get(f"/v1/training/evaluations/{started['evaluationId']}").json()["phase"] != "RUNNING":
            assert time.monotonic() < deadline, stop
            time.sleep(0.1)
        proc.stop() if stop == "sigterm" else proc.kill9()

        proc = server_factory("evaluate")  # the same data dir: the next server process
        cli, client = Cli(capsys, proc.url), httpx.Client(base_url=proc.url, headers=proc.headers, timeout=300)
        done = json.loads(cli.ok("training", "evaluations", "wait", started["evaluationId"], "--timeout", "300",
                                 "-o", "json-compact").out.splitlines()[-1])
        assert done["phase"] == "COMPLETED" and done["attempt"] == 2, (stop, done)
        assert done["report"]["scored"] == 20, stop
