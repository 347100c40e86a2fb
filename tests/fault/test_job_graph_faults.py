"""A chain of jobs survives the server's death between its links: a run waiting for its dataset's analysis (an edge of
the job graph) whose server is killed (SIGKILL) after the analysis completed, as the run was about to be granted,
is granted after a restart, checked against that analysis, and trains to completion."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from optimize.store.db import Store
from optimize.store.tables import Analysis, JobEdge, Run
from tests.conftest import chat_row, from_standin, start_server, write_jsonl

pytestmark = [pytest.mark.fault, pytest.mark.integration]
MODEL = "optimize/tiny-llama-3.2"


def start_server_dying_at(data_dir: Path, site: str) -> tuple[subprocess.Popen, str, dict[str, str]]:
    """A server that kills itself (SIGKILL) at the named crash point (`core.crashpoints`); returns its process, its
    URL and its admin's headers once it answers."""
    data_dir.mkdir(parents=True, exist_ok=True)
    log = (data_dir / "server.log").open("ab")
    process = subprocess.Popen([sys.executable, "-m", "optimize", "server", "start", "--port", "0", "--data-dir",
                                str(data_dir)], stdout=log, stderr=subprocess.STDOUT,
                               env={**os.environ, "HF_HUB_OFFLINE": "1", "OPTIMIZE_CRASH_AT": site})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, (data_dir / "server.log").read_text()[-3000:]
        try:
            url = json.loads((data_dir / "server.json").read_text())["url"]
            if httpx.get(f"{url}/v1/health", timeout=2).status_code == 200:
                token = (data_dir / "admin-token").read_text().strip()
                return process, url, {"Authorization": f"Bearer {token}"}
        except (OSError, ValueError, KeyError, httpx.HTTPError):
            pass
        time.sleep(0.1)
    process.kill()
    raise AssertionError("the server did not start")


def test_a_run_waiting_for_its_analysis_is_granted_after_the_server_died_between_the_two(tmp_path):
    data_dir = tmp_path / "server"
    # the first grant is the analysis's; the second, the run's once the analysis completed: the server dies there
    process, url, headers = start_server_dying_at(data_dir, "scheduler.grant:2")
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=600) as client:
            client.post(f"/v1/training/base-models/{MODEL}/select", json=from_standin(MODEL)).raise_for_status()
            rows = write_jsonl(tmp_path / "d.jsonl", [chat_row(f"question {i}", f"answer {i}") for i in range(8)])
            from optimize.cli.main import main

            assert main(["registry", "datasets", "register", "chain/d", "-f", str(rows), "--server", url]) == 0
            client.post("/v1/training/projects", json={"name": "chain"}).raise_for_status()
            run = client.post("/v1/training/runs", json={
                "kind": "run", "project": "chain", "baseModel": MODEL,
                "config": {"dataset": "d", "maxSeqLength": 128,
                           "hyperparams": {"training": {"maxSteps": 2, "batchSize": 2}}},
                "execution": {"deviceProfile": "cpu", "gpus": 1}}).json()
            assert run["lengthCheck"]["status"] == "waiting", run
        assert process.wait(120) == -9  # killed at the run's grant
    finally:
        if process.poll() is None:
            process.kill()

    store = Store(f"sqlite:///{data_dir / 'optimize.db'}")
    with store.transaction() as session:  # as the server left it: the analysis done, the run still waiting for it
        [analysis] = session.scalars(select(Analysis)).all()
        [edge] = session.scalars(select(JobEdge)).all()
        queued = session.get(Run, run["runId"])
        assert analysis.phase == "done"
        assert (edge.kind, edge.job_id, edge.upstream_kind, edge.upstream_id, edge.output) == (
            "run", run["runId"], "analysis", analysis.id, "report")
        assert queued.phase == "QUEUED" and queued.length_check["status"] == "waiting" and queued.attempt == 0
    store.dispose()

    restarted = start_server(data_dir)
    try:
        with httpx.Client(base_url=restarted.url, headers=restarted.headers, timeout=600) as client:
            deadline = time.monotonic() + 300
            final = client.get(f"/v1/training/runs/{run['runId']}").json()
            while final["phase"] not in ("COMPLETED", "FAILED", "CANCELLED") and time.monotonic() < deadline:
                time.sleep(0.5)
                final = client.get(f"/v1/training/runs/{run['runId']}").json()
            assert final["phase"] == "COMPLETED", final.get("failureReason")
            check = final["lengthCheck"]  # checked against the analysis that completed before the server died
            assert check["status"] == "passed"
            assert [d["analysisId"] for d in check["datasets"]] == [analysis.id]
            assert final["attempt"] == 1
    finally:
        restarted.stop()
