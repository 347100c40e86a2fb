"""Per-project quotas, on a server of their own with small quotas: a request over a quota is answered 429 naming
the quota and what holds it, nothing is stored, room comes back when the holder ends, and `training capacity` and
`registry info` show the quotas and their use (text and JSON)."""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid

import httpx
import pytest

from tests.conftest import Cli, chat_row, from_standin, write_jsonl
from tests.run_fixtures import MODEL, plan

pytestmark = pytest.mark.integration

QUOTAS = {"OPTIMIZE_QUOTA_OPEN_RUNS": "1", "OPTIMIZE_QUOTA_QUEUED_WORK": "1", "OPTIMIZE_QUOTA_UPLOAD_SESSIONS": "1",
          "OPTIMIZE_QUOTA_STORED_BYTES": "3000", "OPTIMIZE_PROJECT_QUOTAS": json.dumps({"roomy": {"openRuns": 3}})}


@pytest.fixture(scope="module")
def quota_server(tmp_path_factory):
    from tests.conftest import start_server

    proc = start_server(tmp_path_factory.mktemp("quotas"), env=QUOTAS)
    yield proc
    proc.stop()


def manifest_for(data: bytes) -> list[dict]:
    return [{"index": 0, "path": "examples.jsonl", "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
             "lines": data.count(b"\n")}]


def rows_bytes(text: str, count: int = 1) -> bytes:
    return b"".join((json.dumps(chat_row(f"{text} {i}", "fine")) + "\n").encode() for i in range(count))


def test_upload_sessions_and_stored_bytes_are_held_to_the_quota(quota_server, tmp_path, capsys):
    url, headers = quota_server.url, quota_server.headers
    first = httpx.post(f"{url}/v1/registry/dataset-uploads", headers=headers,
                       json={"dataset": "shop/a", "format": "chat-jsonl-v1", "shards": manifest_for(rows_bytes("a"))})
    assert first.status_code == 200, first.text
    second = httpx.post(f"{url}/v1/registry/dataset-uploads", headers=headers,
                        json={"dataset": "shop/b", "format": "chat-jsonl-v1", "shards": manifest_for(rows_bytes("b"))})
    assert second.status_code == 429, second.text
    problem = second.json()
    assert problem["code"] == "too_many" and problem["quota"] == "uploadSessions" and problem["limit"] == 1
    assert "namespace shop already has 1 open upload sessions" in problem["detail"]
    assert f"shop/a ({first.json()['uploadId'][:12]})" in problem["detail"]  # what holds it
    again = httpx.post(f"{url}/v1/registry/dataset-uploads", headers=headers,
                       json={"dataset": "shop/a", "format": "chat-jsonl-v1", "shards": manifest_for(rows_bytes("a"))})
    assert again.status_code == 200 and again.json()["uploadId"] == first.json()["uploadId"]  # the same session

    cli = Cli(capsys, url)
    cli.ok("registry", "datasets", "register", "store/big", "-f",
           str(write_jsonl(tmp_path / "big.jsonl", [chat_row(f"q {i}", "a") for i in range(30)])))
    used = json.loads(cli.ok("training", "capacity", "-o", "json").out)  # store has no project: none listed
    assert all(p["project"] != "store" for p in used["projects"])
    refused = cli("registry", "datasets", "register", "store/more", "-f",
                  str(write_jsonl(tmp_path / "more.jsonl", [chat_row(f"m {i}", "b") for i in range(30)])))
    assert refused.code == 1 and "its quota storedBytes (2.9 KiB)" in refused.err, refused.err
    assert "OPTIMIZE_QUOTA_STORED_BYTES" in refused.err
    listed = cli.json("registry", "datasets", "list", "--namespace", "store")["datasets"]
    assert [d["name"] for d in listed] == ["big"]  # nothing stored for the refused one


def test_scoring_bundles_count_in_the_stored_bytes(quota_server, tmp_path, capsys):
    """A bundle's archive counts toward its namespace's storedBytes: a version past the quota is refused (nothing
    registered), and so is a dataset upload the bundles leave no room for."""
    import os

    cli = Cli(capsys, quota_server.url)
    first, second = tmp_path / "one", tmp_path / "two"
    for folder in (first, second):
        folder.mkdir()
        (folder / "reward.py").write_text("def compute_score(p, c, f):\n    return 1.0\n")
        (folder / "table.bin").write_bytes(os.urandom(1800))  # random bytes: the archive holds them uncompressed
    cli.ok("registry", "bundles", "register", "kit/scorer", "-f", str(first))
    refused = cli("registry", "bundles", "register", "kit/scorer", "-f", str(second))
    assert refused.code == 1 and re.search(r"namespace kit holds \d\.\d KiB of datasets, scoring bundles and open "
                                           r"uploads; \d\.\d KiB more would pass its quota storedBytes \(2\.9 KiB\)",
                                           refused.err), refused.err
    assert [v["version"] for v in cli.json("registry", "bundles", "versions", "kit/scorer")["versions"]] == [1]
    dataset = cli("registry", "datasets", "register", "kit/rows", "-f",
                  str(write_jsonl(tmp_path / "rows.jsonl", [chat_row(f"q {i}", "a") for i in range(20)])))
    assert dataset.code == 1 and "its quota storedBytes" in dataset.err, dataset.err


def wait_for(predicate, what: str, seconds: float = 120):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def test_open_runs_and_queued_work_are_held_to_the_quota_and_shown(quota_server, tmp_path, capsys):
    url = quota_server.url
    client = httpx.Client(base_url=url, headers=quota_server.headers, timeout=120)
    client.post(f"/v1/training/base-models/{MODEL}/select", json=from_standin(MODEL)).raise_for_status()
    cli = Cli(capsys, url)
    started = []
    try:
        for project in ("tight", "roomy"):
            client.post("/v1/training/projects", json={"name": project}).raise_for_status()
            rows = write_jsonl(tmp_path / f"{project}.jsonl", [chat_row(f"{project} {i}", "ok") for i in range(8)])
            cli.ok("registry", "datasets", "register", f"{project}/chat", "-f", str(rows))
        long = plan("tight", "chat", submissionId=uuid.uuid4().hex)
        long["config"]["hyperparams"]["training"]["maxSteps"] = 100000
        first = client.post("/v1/training/runs", json=long).json()
        started.append(first["runId"])
        second = client.post("/v1/training/runs", json={**long, "submissionId": uuid.uuid4().hex})
        assert second.status_code == 429, second.text
        assert second.json()["quota"] == "openRuns"
        assert f"project tight already has 1 open runs, its quota openRuns (1); held by run {first['runId'][:12]}" \
            in second.json()["detail"]
        assert "akka training runs cancel" in second.json()["hint"]

        # the device is busy with the first run: one more in roomy waits, and a second waiting one is refused
        wait_for(lambda: client.get(f"/v1/training/runs/{first['runId']}").json()["phase"] != "QUEUED",
                 "the first run to be granted the cpu")
        roomy = plan("roomy", "chat", submissionId=uuid.uuid4().hex)
        queued = client.post("/v1/training/runs", json=roomy).json()
        started.append(queued["runId"])
        assert queued["phase"] == "QUEUED"
        refused = client.post("/v1/training/runs", json={**roomy, "submissionId": uuid.uuid4().hex})
        assert refused.status_code == 429 and refused.json()["quota"] == "queuedWork"
        assert f"held by run {queued['runId'][:12]}" in refused.json()["detail"]

        capacity = cli.json("training", "capacity")
        by_project = {p["project"]: p for p in capacity["projects"]}
        assert by_project["tight"]["used"]["openRuns"] == 1 and by_project["tight"]["quota"]["openRuns"] == 1
        assert by_project["roomy"]["quota"]["openRuns"] == 3 and by_project["roomy"]["used"]["queuedWork"] == 1
        text = cli.ok("training", "capacity").out
        assert "Training projects" in text and "OPEN RUNS" in text
        assert [p["project"] for p in cli.json("training", "capacity", "--project", "roomy")["projects"]] == ["roomy"]
        info = cli.ok("registry", "info").out
        assert "per project: 1 open runs, 1 queued, 1 upload sessions, 2.9 KiB stored" in info
        assert "roomy: 3 open runs" in info
        assert cli.json("registry", "info")["quotas"]["projects"]["roomy"]["openRuns"] == 3

        # room comes back when the holder ends
        cli.ok("training", "runs", "cancel", first["runId"], "--force")
        wait_for(lambda: client.get(f"/v1/training/runs/{first['runId']}").json()["phase"] == "CANCELLED",
                 "the first run to end")
        third = client.post("/v1/training/runs", json={**long, "submissionId": uuid.uuid4().hex})
        assert third.status_code == 202, third.text  # accepted, queued
        started.append(third.json()["runId"])
    finally:
        for run_id in started:
            client.post(f"/v1/training/runs/{run_id}/cancel")
        client.close()
