"""Smoke checks through the CLI, on the stand-in on CPU: a supervised run's smoke check trains its slice, answers
and scores the text answers (leaving tool-call answers out and counting them) and the run goes on; one whose answers
fall below minScore ends FAILED with the reason and `runs wait --exit-status` exits non-zero; a GRPO run's smoke
check scores with its reward terms; a smoke check with data.truncation: drop is refused at submission."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.conftest import Cli, chat_row, from_standin, headers_for, write_jsonl
from tests.run_fixtures import MODEL, plan, write_plan

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def smoke_project(sqlite_server, tmp_path_factory):
    import httpx

    url = sqlite_server.url
    name = f"smoke{uuid.uuid4().hex[:8]}"
    tmp = tmp_path_factory.mktemp("smoke")
    client = httpx.Client(base_url=url, headers=headers_for(url), timeout=600)
    client.post(f"/v1/training/base-models/{MODEL}/select", json=from_standin(MODEL)).raise_for_status()
    client.post("/v1/training/projects", json={"name": name}).raise_for_status()
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": {"q": "x"}}}
    rows = [{"messages": [{"role": "user", "content": "Look it up"},
                          {"role": "assistant", "content": "", "tool_calls": [call]}]}]
    rows += [chat_row(f"Say {word}", word) for word in ("alpha", "beta", "gamma", "delta", "omega", "sigma")]
    from optimize.cli.main import main

    assert main(["registry", "datasets", "register", f"{name}/chat", "-f", str(write_jsonl(tmp / "c.jsonl", rows)),
                 "--server", url]) == 0
    assert main(["registry", "datasets", "register", f"{name}/plain", "-f",
                 str(write_jsonl(tmp / "p.jsonl", rows[1:])), "--server", url]) == 0
    return {"url": url, "name": name, "tmp": tmp}


def smoke_plan(project: str, **smoke) -> dict:
    document = plan(project, "chat")
    document["config"]["hyperparams"]["training"]["maxSteps"] = 2
    document["config"]["smoke"] = {"rows": 4, "steps": 2, "grader": "contains", **smoke}
    return document


def test_a_smoke_check_scores_the_text_answers_and_the_run_goes_on(smoke_project, capsys):
    cli = Cli(capsys, smoke_project["url"])
    path = write_plan(smoke_project["tmp"], smoke_plan(smoke_project["name"]))
    run = json.loads(cli.ok("training", "runs", "start", "-f", path, "--force", "--wait", "-o", "json").out)
    assert run["phase"] == "COMPLETED", run.get("failureReason")
    smoke = run["results"]["smoke"]
    assert smoke["status"] == "passed" and smoke["rows"] == 4 and smoke["steps"] == 2
    assert smoke["leftOut"] == 1 and smoke["scored"] == 3  # the tool-call answer is not scored
    assert 0 <= smoke["meanScore"] <= 1
    text = cli.ok("training", "runs", "get", run["runId"]).out
    assert "Smoke check  passed — 4 row(s), 2 update(s); mean score" in text
    assert "1 answer(s) calling tools left out" in text


def test_a_failed_smoke_check_ends_the_run_failed_with_its_reason(smoke_project, capsys):
    cli = Cli(capsys, smoke_project["url"])
    path = write_plan(smoke_project["tmp"], smoke_plan(smoke_project["name"], minScore=2.0))
    run_id = cli.json("training", "runs", "start", "-f", path, "--force")["runId"]
    waited = cli("training", "runs", "wait", run_id, "--exit-status", "-o", "json")
    assert waited.code != 0
    run = json.loads(waited.out)
    assert run["phase"] == "FAILED"
    assert run["failureReason"].startswith("the smoke check failed: the answers' mean score")
    assert "below smoke.minScore 2" in run["failureReason"]
    assert run["results"]["smoke"]["status"] == "failed"
    assert not cli.json("training", "runs", "snapshots", run_id)["snapshots"]  # no full-run update was trained


def test_a_grpo_smoke_check_scores_with_the_reward_terms(smoke_project, capsys):
    cli = Cli(capsys, smoke_project["url"])
    document = {"kind": "run", "project": smoke_project["name"], "baseModel": MODEL,
                "config": {"dataset": "chat", "method": "grpo", "maxSeqLength": 256,
                           "rlHyperparams": {"maxCompletionLength": 4, "training": {"maxSteps": 1, "batchSize": 2}},
                           "reward": {"terms": [{"kind": "length", "target": 0, "max": 100}]},
                           "smoke": {"rows": 2, "steps": 1}},
                "execution": {"deviceProfile": "cpu"}}
    run = json.loads(cli("training", "runs", "start", "-f", write_plan(smoke_project["tmp"], document), "--force",
                         "--wait", "-o", "json").out)
    assert run["phase"] == "FAILED" and "line 1: the final answer calls tools" in run["failureReason"]  # by line
    document["config"]["dataset"] = "plain"
    run = json.loads(cli.ok("training", "runs", "start", "-f", write_plan(smoke_project["tmp"], document), "--force",
                            "--wait", "-o", "json").out)
    assert run["phase"] == "COMPLETED", run.get("failureReason")
    smoke = run["results"]["smoke"]
    assert smoke["status"] == "passed" and smoke["scored"] == 2 and smoke["leftOut"] == 0
    assert -1 <= smoke["meanScore"] <= 0  # the length penalty of its greedy answers


def test_a_smoke_check_refuses_truncation_that_leaves_rows_out(smoke_project, capsys):
    cli = Cli(capsys, smoke_project["url"])
    document = smoke_plan(smoke_project["name"])
    document["config"]["data"] = {"truncation": "drop"}
    refused = cli("training", "runs", "start", "-f", write_plan(smoke_project["tmp"], document), "--force",
                  "--dry-run")
    assert refused.code == 1 and "data.truncation: drop leaves out or trims rows" in refused.err
