"""Chains of work survive the server's death between their links (SIGKILL at a crash point): a run waiting for its
dataset's analysis (an edge of the job graph) whose server dies after the analysis completed, as the run was about
to be granted, is granted after a restart, checked against that analysis, and trains to completion; a distillation
whose server dies after its worker ended, before its accepted rows were registered, registers them after a restart
and completes, the version naming it in its lineage."""

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
from optimize.store.tables import Analysis, DatasetVersion, Distillation, JobEdge, Run
from tests.conftest import chat_row, from_standin, start_server, write_jsonl
from tests.run_fixtures import CAPITALS, capital_rows, teacher_plan, write_plan

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


def test_a_distillation_registers_its_rows_after_the_server_died_between_its_worker_and_the_assembly(tmp_path):
    data_dir = tmp_path / "server"
    process, url, headers = start_server_dying_at(data_dir, "distillation.assemble")
    from optimize.cli.main import main

    try:
        with httpx.Client(base_url=url, headers=headers, timeout=600) as client:
            client.post(f"/v1/training/base-models/{MODEL}/select", json=from_standin(MODEL)).raise_for_status()
            client.post("/v1/training/projects", json={"name": "di"}).raise_for_status()
            assert main(["registry", "datasets", "register", "di/chat", "-f",
                         str(write_jsonl(tmp_path / "t.jsonl", capital_rows(4))), "--server", url]) == 0
            teacher = teacher_plan("di")  # an adapter that answers capitals and ends its answers
            assert main(["training", "runs", "start", "-f", write_plan(tmp_path, teacher), "--force", "--wait",
                         "--exit-status", "--server", url]) == 0
            model = client.get("/v1/training/runs", params={"project": "di"}).json()["runs"][0]["results"]["model"]
            questions = [chat_row(f"What is the capital of {country}?", f"It is {city}.") for country, city in CAPITALS]
            assert main(["registry", "datasets", "register", "di/questions", "-f",
                         str(write_jsonl(tmp_path / "q.jsonl", questions)), "--server", url]) == 0
            started = client.post("/v1/training/distillations", json={
                "project": "di", "teacher": model, "source": "di/questions", "target": "di/distilled",
                "temperature": 0, "maxTokens": 24})
            assert started.status_code in (200, 201, 202), started.text
            distillation_id = started.json()["distillationId"]
        assert process.wait(300) == -9  # killed as the assembly was about to register the accepted rows
    finally:
        if process.poll() is None:
            process.kill()

    store = Store(f"sqlite:///{data_dir / 'optimize.db'}")
    with store.transaction() as session:  # as the server left it: answered, its device released, nothing registered
        left = session.get(Distillation, distillation_id)
        assert left.phase == "ASSEMBLING" and left.registered is None
        assert left.progress["answered"] == len(CAPITALS)
        assert all(version.lineage is None for version in session.scalars(select(DatasetVersion)))  # uploads only
    store.dispose()

    restarted = start_server(data_dir)
    try:
        with httpx.Client(base_url=restarted.url, headers=restarted.headers, timeout=600) as client:
            deadline = time.monotonic() + 120
            done = client.get(f"/v1/training/distillations/{distillation_id}").json()
            while done["phase"] == "ASSEMBLING" and time.monotonic() < deadline:
                time.sleep(0.5)
                done = client.get(f"/v1/training/distillations/{distillation_id}").json()
            assert done["phase"] == "COMPLETED", done.get("failureReason")
            assert done["registered"]["reference"] == "di/distilled:v1"
            assert done["registered"]["rows"] == done["progress"]["accepted"]
            version = client.get("/v1/registry/datasets/di/distilled/versions/v1").json()
            assert version["lineage"]["producedBy"] == {"kind": "distillation", "id": distillation_id}
    finally:
        restarted.stop()
