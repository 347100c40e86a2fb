"""Regular expressions a user writes, against a real server and worker on the tiny stand-in: a GRPO dry run whose
regex term is `^(a+)+$` (minutes of backtracking for Python's `re` over 31 `a`s and a `!`) answers at once while
`/v1/health` keeps answering within a second; an evaluation graded by `regex:(\\w|\\S|.)*X` completes on its first
attempt (its worker's heartbeat never stopped); a backreference is refused at submission, naming the field."""

from __future__ import annotations

import json
import time
import uuid

import httpx
import pytest

from tests.conftest import Cli, chat_row, from_standin, write_jsonl
from tests.health_watch import HealthWatch
from tests.run_fixtures import MODEL, write_plan

pytestmark = pytest.mark.integration

CATASTROPHIC = "a" * 31 + "!"


@pytest.fixture(scope="module")
def patterns_project(sqlite_server, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("patterns")
    name = f"rx{uuid.uuid4().hex[:8]}"
    client = httpx.Client(base_url=sqlite_server.url, headers=sqlite_server.headers, timeout=600)
    client.post(f"/v1/training/base-models/{MODEL}/select", json=from_standin(MODEL)).raise_for_status()
    client.post("/v1/training/projects", json={"name": name}).raise_for_status()
    from optimize.cli.main import main

    rows = [chat_row("Say a", CATASTROPHIC), chat_row("Say b", "b")]
    assert main(["registry", "datasets", "register", f"{name}/asks", "-f", str(write_jsonl(tmp / "a.jsonl", rows)),
                 "--server", sqlite_server.url]) == 0
    return {"name": name, "tmp": tmp}


def grpo_plan(project: str, pattern: str) -> dict:
    return {"kind": "run", "project": project, "baseModel": MODEL,
            "config": {"dataset": "asks", "method": "grpo", "maxSeqLength": 128,
                       "rlHyperparams": {"optimizer": {"learningRate": 0.01}, "maxCompletionLength": 4,
                                         "generations": 2, "training": {"maxSteps": 1, "batchSize": 2}},
                       "reward": {"terms": [{"kind": "regex", "pattern": pattern, "name": "shape"}]}},
            "execution": {"deviceProfile": "cpu"}}


def test_a_grpo_dry_run_with_a_catastrophic_pattern_answers_while_health_does(patterns_project, sqlite_server,
                                                                             capsys):
    cli = Cli(capsys, sqlite_server.url)
    path = write_plan(patterns_project["tmp"], grpo_plan(patterns_project["name"], r"^(a+)+$"))
    with HealthWatch(sqlite_server.url, every=0.05) as health:
        started = time.monotonic()
        dry = cli.json("training", "runs", "start", "-f", path, "--dry-run")
        took = time.monotonic() - started
    [check] = dry["rewardCheck"]
    assert check["term"] == "shape" and check["scored"] == 2 and check["mean"] == 0.0 and check["errors"] == 0
    assert took < 30, took  # Python's `re` takes minutes on the first row alone
    assert health.took and max(health.took) < 1.0, health.took


def test_a_backreference_is_refused_at_submission_naming_the_field(patterns_project, sqlite_server, capsys):
    cli = Cli(capsys, sqlite_server.url)
    path = write_plan(patterns_project["tmp"], grpo_plan(patterns_project["name"], r"(a)\1"))
    refused = cli("training", "runs", "start", "-f", path, "--dry-run")
    assert refused.code == 1
    assert (r"config.reward.terms[0].pattern: '(a)\\1' uses a backreference (\1), which linear-time matching does "
            "not support; rewrite it without a backreference") in refused.err, refused.err


def test_an_evaluation_graded_by_a_catastrophic_pattern_completes_on_its_first_attempt(patterns_project,
                                                                                      sqlite_server, capsys):
    cli = Cli(capsys, sqlite_server.url)
    grader = r"regex:(\w|\S|.)*X"
    with HealthWatch(sqlite_server.url, every=0.05) as health:
        done = json.loads(cli.ok("training", "evaluations", "start", "--model", MODEL, "--project",
                                 patterns_project["name"], "--dataset", f"{patterns_project['name']}/asks",
                                 "--grader", grader, "--generations", "2", "--temperature", "1.0",
                                 "--max-new-tokens", "24", "--wait", "--exit-status", "-o", "json-compact"
                                 ).out.splitlines()[-1])
    assert done["phase"] == "COMPLETED" and done["attempt"] == 1, done
    assert done["grader"] == grader and done["report"]["scored"] == 4  # two rows, two sampled answers each
    answers = [sample["answer"] for p in cli.json("training", "evaluations", "predictions", done["evaluationId"])
               ["predictions"] for sample in p["samples"]]
    # an answer of many word characters and no X is about 3^length steps of backtracking for Python's `re`
    assert any(len(answer) >= 20 and "X" not in answer for answer in answers), answers
    assert health.took and max(health.took) < 1.0, health.took
