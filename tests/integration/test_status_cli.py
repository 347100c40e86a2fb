"""`akka status` against the session's shared server: every part is there in text and JSON, a project's own work
shows in the counts and the queue, a token limited to a project sees only that project's jobs, and no server is
refused with exit 1. Other tests use the server at the same time, so only shapes and this module's own work are
asserted."""

from __future__ import annotations

import time

import pytest

from tests.api.test_limited_tokens import issue
from tests.conftest import Cli
from tests.integration.test_project_archive import long_plan, start
from tests.run_fixtures import capitals_project

pytestmark = pytest.mark.integration

KINDS = ["run", "analysis", "evaluation", "distillation", "curation", "endpoint", "comparison", "pipeline"]
PARTS = ["server", "jobs", "devices", "endpoints", "queue"]


@pytest.fixture(scope="module")
def project(sqlite_server, tmp_path_factory):
    """A project of its own (the server is shared) with a chat dataset in its registry namespace."""
    return capitals_project(sqlite_server.url, tmp_path_factory.mktemp("status"), "stat")


def runs_of(status: dict) -> dict:
    return next(kind for kind in status["jobs"] if kind["kind"] == "run")


def test_status_shows_every_part(sqlite_server, capsys):
    cli = Cli(capsys, sqlite_server.url)
    status = cli.json("status")
    assert list(status) == PARTS
    assert status["server"]["url"] == sqlite_server.url and status["server"]["database"] == "sqlite"
    assert status["server"]["version"]
    assert [kind["kind"] for kind in status["jobs"]] == KINDS
    for kind in status["jobs"]:
        assert kind["total"] == sum(p["count"] for p in kind["phases"]) and all(p["count"] > 0 for p in kind["phases"])
        flags = [p["open"] for p in kind["phases"]]
        assert flags == sorted(flags, reverse=True)  # open phases first
        assert kind["open"] == sum(p["count"] for p in kind["phases"] if p["open"])
    assert {(pool["pool"], pool["profile"]) for pool in status["devices"]} >= {("training", "cpu"), ("serving", "cpu")}
    for pool in status["devices"]:
        assert {"free", "granted", "declared", "queued"} <= set(pool)
    for endpoint in status["endpoints"]:
        assert endpoint["phase"] in ("STARTING", "READY") and endpoint["models"]
    assert len(status["queue"]["jobs"]) <= min(10, status["queue"]["total"])

    text = cli.ok("status").out
    assert f"Server     {sqlite_server.url}: Optimize {status['server']['version']}, store sqlite" in text
    for heading in ("Jobs", "Devices", "Endpoints", "Queue"):
        assert f"\n{heading}" in text
    for kind in KINDS:
        assert f"\n{kind} " in text
    assert "POOL" in text and "FREE" in text and "GRANTED" in text and "DECLARED" in text


def test_own_work_counts_and_a_limited_token_sees_only_its_project(project, sqlite_server, capsys):
    cli, client, name = Cli(capsys, sqlite_server.url), project["client"], project["name"]
    limited = issue(sqlite_server, "reader", projects=[name])["Authorization"].removeprefix("Bearer ")

    # two runs far longer than the test: one cpu device trains one of them at most, so the other waits for it
    ids = [start(cli, project, long_plan(name)) for _ in range(2)]
    try:
        mine = cli.json("status", "--token", limited)
        assert runs_of(mine)["total"] == 2 and runs_of(mine)["open"] == 2
        assert all(kind["total"] == 0 for kind in mine["jobs"] if kind["kind"] in ("evaluation", "distillation",
                                                                                   "endpoint"))
        assert mine["endpoints"] == []
        queue = mine["queue"]
        assert 1 <= queue["total"] <= 2 and len(queue["jobs"]) == queue["total"]
        for job in queue["jobs"]:
            assert job["kind"] == "run" and job["jobId"] in ids and job["project"] == name
            assert job["deviceProfile"] == "cpu" and job["devices"] == 1 and job["waitingFor"]
        text = cli.ok("status", "--token", limited).out
        assert f"{queue['total']} waiting for devices, oldest first" in text
        assert queue["jobs"][0]["jobId"][:12] in text

        everything = cli.json("status")  # the admin's token sees this project's runs among every other
        assert runs_of(everything)["total"] >= 2 and everything["queue"]["total"] >= 1
    finally:
        for run_id in ids:
            cli.ok("training", "runs", "cancel", run_id, "--force")
    deadline = time.monotonic() + 120
    while any(client.get(f"/v1/training/runs/{run_id}").json()["phase"] != "CANCELLED" for run_id in ids):
        assert time.monotonic() < deadline, "the cancelled runs did not end"
        time.sleep(0.5)

    mine = cli.json("status", "--token", limited)
    assert runs_of(mine) == {"kind": "run", "open": 0, "total": 2,
                             "phases": [{"phase": "CANCELLED", "count": 2, "open": False}]}
    assert mine["queue"] == {"total": 0, "jobs": []}
    text = cli.ok("status", "--token", limited).out
    assert "CANCELLED 2" in text and "nothing waits for devices" in text
    assert "CANCELLED" in " ".join(p["phase"] for p in runs_of(cli.json("status"))["phases"])


def test_status_without_a_server_exits_one(capsys):
    cli = Cli(capsys, "http://127.0.0.1:9")
    text = cli("status")
    assert text.code == 1 and text.out == ""
    assert "error: no Optimize server answers at http://127.0.0.1:9" in text.err and "akka server start" in text.err
    result = cli("status", "-o", "json")
    assert result.code == 1 and result.err == ""
    assert result.json["error"]["code"] == "unreachable"
    assert result.json["error"]["message"] == "no Optimize server answers at http://127.0.0.1:9 (ConnectError)"
