"""Quotas hold under concurrency: 64 clients at once, on a server of their own per store (SQLite and PostgreSQL),
get exactly the quota admitted and the rest 429 naming it, never a 500: upload sessions into one namespace, runs
waiting for the deployment's one busy cpu slot (queuedWork) and runs not yet ended (openRuns). An archive racing
submissions into its project either sees their runs or refuses them all."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.conftest import chat_row, from_standin, headers_for, write_jsonl
from tests.integration.test_quotas import manifest_for, rows_bytes
from tests.run_fixtures import MODEL, plan

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CLIENTS = 64
UPLOADS, QUEUED, OPEN = 7, 6, 5
RACERS = 16  # submissions racing an archive, fewer than the default quotas
QUOTAS = {"OPTIMIZE_QUOTA_UPLOAD_SESSIONS": str(UPLOADS),
          "OPTIMIZE_PROJECT_QUOTAS": json.dumps({"queue": {"queuedWork": QUEUED}, "open": {"openRuns": OPEN}})}


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def race_server(request, tmp_path_factory):
    from tests.conftest import fresh_postgres_url, postgres_available, start_server

    database = None
    if request.param == "postgres":
        if not postgres_available():
            pytest.skip("no PostgreSQL answers")
        database = fresh_postgres_url()
    proc = start_server(tmp_path_factory.mktemp(f"quota-race-{request.param}"), database, env=QUOTAS)
    yield proc
    proc.stop()


def all_at_once(url: str, send: Callable[[httpx.Client, int], httpx.Response],
                count: int = CLIENTS) -> list[httpx.Response]:
    """`send` from `count` threads, each with a client of its own, released together."""
    start = threading.Barrier(count)

    def one(index: int) -> httpx.Response:
        with httpx.Client(base_url=url, headers=headers_for(url), timeout=120) as client:
            start.wait()
            return send(client, index)

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(one, range(count)))


def admitted(answers: list[httpx.Response], quota: str) -> list[httpx.Response]:
    """The answers that admitted; every other one is a 429 naming `quota` (no 500, no other refusal)."""
    statuses = sorted({a.status_code for a in answers})
    assert set(statuses) <= {200, 202, 429}, [a.text for a in answers if a.status_code not in (200, 202, 429)][:3]
    refused = [a for a in answers if a.status_code == 429]
    assert {a.json()["quota"] for a in refused} <= {quota}, refused[0].text
    return [a for a in answers if a.status_code != 429]


def test_upload_sessions_opened_at_once_are_held_to_the_quota(race_server):
    namespace = f"race{uuid.uuid4().hex[:8]}"

    def open_session(client: httpx.Client, index: int) -> httpx.Response:
        return client.post("/v1/registry/dataset-uploads", json={
            "dataset": f"{namespace}/d{index}", "format": "chat-jsonl-v1",
            "shards": manifest_for(rows_bytes(f"row {index}"))})

    opened = admitted(all_at_once(race_server.url, open_session), "uploadSessions")
    assert len(opened) == UPLOADS
    with httpx.Client(base_url=race_server.url, headers=race_server.headers) as client:
        more = open_session(client, CLIENTS)
    assert more.status_code == 429  # what is stored: exactly the quota
    assert f"namespace {namespace} already has {UPLOADS} open upload sessions" in more.json()["detail"]


def wait_until(predicate, what: str, seconds: float = 180):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def test_runs_submitted_at_once_are_held_to_queued_work_and_open_runs(race_server, tmp_path, capsys):
    """With the one cpu slot busy, every admitted run waits: exactly queuedWork of them in `queue`, and exactly
    openRuns in `open` (whose queue has room for more)."""
    from optimize.cli.main import main

    url = race_server.url
    client = httpx.Client(base_url=url, headers=race_server.headers, timeout=120)
    client.post(f"/v1/training/base-models/{MODEL}/select", json=from_standin(MODEL)).raise_for_status()
    rows = write_jsonl(tmp_path / "rows.jsonl", [chat_row(f"question {i}", "ok") for i in range(8)])
    for project in ("busy", "queue", "open", "late"):
        client.post("/v1/training/projects", json={"name": project}).raise_for_status()
        assert main(["registry", "datasets", "register", f"{project}/chat", "-f", str(rows), "--server", url]) == 0
    started: list[str] = []
    try:
        long = plan("busy", "chat", submissionId=uuid.uuid4().hex)
        long["config"]["hyperparams"]["training"]["maxSteps"] = 100000
        holder = client.post("/v1/training/runs", json=long)
        assert holder.status_code == 202, holder.text
        started.append(holder.json()["runId"])
        wait_until(lambda: client.get(f"/v1/training/runs/{started[0]}").json()["phase"] != "QUEUED",
                   "the holder to be granted the cpu slot")

        for project, quota, limit in (("queue", "queuedWork", QUEUED), ("open", "openRuns", OPEN)):
            def submit(each: httpx.Client, index: int, project=project) -> httpx.Response:
                return each.post("/v1/training/runs", json=plan(project, "chat", submissionId=uuid.uuid4().hex))

            runs = admitted(all_at_once(url, submit), quota)
            started += [r.json()["runId"] for r in runs]
            assert len(runs) == limit, f"{project}: {len(runs)} admitted against {quota} {limit}"
            assert all(r.json()["phase"] == "QUEUED" for r in runs)
            listed = client.get("/v1/training/runs", params={"project": project}).json()["runs"]
            assert len(listed) == limit  # nothing stored for the refused ones

        # an archive racing submissions: it waits for those that hold the project's lock and then sees their runs
        # (and is refused), or goes first and every later one sees the project archived; never both
        def archive_or_submit(each: httpx.Client, index: int) -> httpx.Response:
            if index == RACERS // 2:
                return each.post("/v1/training/projects/late/archive")
            return each.post("/v1/training/runs", json=plan("late", "chat", submissionId=uuid.uuid4().hex))

        answers = all_at_once(url, archive_or_submit, RACERS)
        archive, submissions = answers[RACERS // 2], answers[:RACERS // 2] + answers[RACERS // 2 + 1:]
        runs = [a for a in submissions if a.status_code == 202]
        started += [r.json()["runId"] for r in runs]
        late = [a for a in submissions if a.status_code != 202]
        assert all(a.status_code == 400 and "is archived and takes no new work" in a.json()["detail"] for a in late), \
            [a.text for a in late][:2]
        if archive.status_code == 200:
            assert not runs and client.get("/v1/training/projects/late").json()["archived"]
        else:
            assert archive.status_code == 400 and "has work in progress" in archive.json()["detail"], archive.text
            assert not late and len(runs) == RACERS - 1
    finally:
        for run_id in started:
            client.post(f"/v1/training/runs/{run_id}/cancel")
        client.close()
