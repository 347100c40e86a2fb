"""Analyses survive process faults: a server restart queues the orphaned attempt again and it completes; a worker
holding a stale lease is refused; acknowledged registrations survive kill -9."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.conftest import Cli, built_standin, chat_row, start_server, write_jsonl

pytestmark = [pytest.mark.fault, pytest.mark.integration]
MODEL = "optimize/tiny-smollm2"


def test_server_restart_queues_an_orphaned_analysis_again_and_it_completes(tmp_path, capsys):
    data_dir = tmp_path / "server"
    proc = start_server(data_dir)
    cli = Cli(capsys, proc.url)
    cli.ok("registry", "datasets", "register", "f/d", "-f", str(write_jsonl(tmp_path / "d.jsonl", [chat_row()])))
    cli.ok("training", "base-models", "select", MODEL, "--from", str(built_standin(MODEL)))
    started = cli.json("training", "datasets", "analyze", "f/d", "--model", MODEL)
    proc.kill9()  # the server dies while its worker is still starting; its reports then reach nobody
    restarted = start_server(data_dir)
    try:
        cli = Cli(capsys, restarted.url)
        deadline = time.monotonic() + 60
        analysis = cli.json("training", "datasets", "analyses", "f/d")["analyses"][0]
        while analysis["phase"] != "done" and time.monotonic() < deadline:
            time.sleep(0.2)
            analysis = cli.json("training", "datasets", "analyses", "f/d")["analyses"][0]
        assert analysis["analysisId"] == started["analysisId"]
        assert analysis["phase"] == "done", analysis
        assert analysis["attempt"] in (1, 2)  # 2 in the usual case: the server died before the worker reported
    finally:
        restarted.stop()


def test_stale_lease_is_refused(sqlite_server):
    url = sqlite_server.url
    for method, path in (("GET", "/v1/internal/jobs/analysis/abc"),
                         ("POST", "/v1/internal/jobs/analysis/abc/heartbeat"),
                         ("POST", "/v1/internal/jobs/analysis/abc/result"),
                         ("GET", "/v1/internal/jobs/analysis/abc/blobs/" + "0" * 64)):
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
