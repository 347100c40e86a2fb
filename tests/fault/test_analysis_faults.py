"""Analyses survive process faults: a server restart fails the orphaned attempt with a reason (and the next
request starts it again); a worker holding a stale lease is refused; acknowledged registrations survive kill -9."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.conftest import Cli, chat_row, start_server, write_jsonl

pytestmark = [pytest.mark.fault, pytest.mark.integration]
MODEL = "optimize/tiny-smollm2"


def test_server_restart_fails_an_orphaned_analysis_which_then_starts_again(tmp_path, capsys):
    data_dir = tmp_path / "server"
    proc = start_server(data_dir)
    cli = Cli(capsys, proc.url)
    cli.ok("registry", "datasets", "register", "f/d", "-f", str(write_jsonl(tmp_path / "d.jsonl", [chat_row()])))
    cli.ok("training", "base-models", "select", MODEL)
    started = cli.json("training", "datasets", "analyze", "f/d", "--model", MODEL)
    proc.kill9()  # the server dies while its worker is still starting; its reports then reach nobody
    restarted = start_server(data_dir)
    try:
        cli = Cli(capsys, restarted.url)
        deadline = time.monotonic() + 30
        analysis = cli.json("training", "datasets", "analyses", "f/d")["analyses"][0]
        while analysis["phase"] not in ("failed", "done") and time.monotonic() < deadline:
            time.sleep(0.2)
            analysis = cli.json("training", "datasets", "analyses", "f/d")["analyses"][0]
        assert analysis["analysisId"] == started["analysisId"]
        if analysis["phase"] == "failed":  # the usual case: the server died before the worker reported
            assert "the server restarted while the analysis ran" in analysis["reason"]
            again = cli.json("training", "datasets", "analyze", "f/d", "--model", MODEL, "--wait")
            assert again["phase"] == "done" and again["attempt"] == 2
    finally:
        restarted.stop()


def test_stale_lease_is_refused(sqlite_server):
    url = sqlite_server.url
    for method, path in (("GET", "/v1/internal/analyses/abc"), ("POST", "/v1/internal/analyses/abc/running"),
                         ("POST", "/v1/internal/analyses/abc/result")):
        response = httpx.request(method, url + path, headers={"X-Lease-Token": "not-the-lease"},
                                 json={} if method == "POST" else None)
        assert response.status_code == 409 and response.json()["code"] == "lease_lost"


def test_acknowledged_registration_survives_kill_9(tmp_path, capsys):
    data_dir = tmp_path / "server"
    proc = start_server(data_dir)
    version = Cli(capsys, proc.url).json("registry", "datasets", "register", "k/d", "-f",
                                         str(write_jsonl(tmp_path / "d.jsonl", [chat_row("kept")])))
    proc.kill9()
    restarted = start_server(data_dir)
    try:
        again = Cli(capsys, restarted.url).json("registry", "datasets", "get", "k/d:v1")
        assert again["digest"] == version["digest"] and again["examples"] == 1
    finally:
        restarted.stop()
