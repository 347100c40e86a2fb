"""`akka training runs|evaluations|endpoints|datasets logs`: the worker's log of a job, read through the CLI from the
session's server (the completed run trained once per session; an analysis of its dataset). The log holds what TRL
printed; an attempt or a job that does not exist is refused naming what does; `-o json` prints the server's
answers as JSON lines; `--follow` on a settled job returns once its log is drained."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.conftest import Cli

pytestmark = pytest.mark.integration


@pytest.fixture
def cli(capsys, sqlite_server) -> Cli:
    return Cli(capsys, sqlite_server.url)


def test_runs_logs_shows_what_the_worker_printed(completed_run, cli):
    run_id = completed_run["run"]["runId"]
    shown = cli.ok("training", "runs", "logs", run_id[:8])
    losses = [line for line in shown.out.splitlines() if line.startswith("{'loss': ")]
    assert len(losses) == 16, shown.out[-2000:]  # TRL's line per update: logging every step, 16 updates
    assert "'learning_rate': " in losses[0] and "'grad_norm': " in losses[0]
    assert shown.err == ""  # one attempt: nothing to say besides the log itself
    # the same log, as the server answers it: one JSON object per line, the whole log in one chunk here
    answers = [json.loads(line) for line in cli.ok("training", "runs", "logs", run_id[:8], "-o", "json")
               .out.splitlines()]
    assert len(answers) == 1
    answer = answers[0]
    assert {k: answer[k] for k in ("kind", "id", "phase", "attempt", "attempts", "offset", "settled")} == {
        "kind": "run", "id": run_id, "phase": "COMPLETED", "attempt": 1, "attempts": [1], "offset": 0,
        "settled": True}
    assert answer["text"] == shown.out and answer["nextOffset"] == answer["size"] == len(shown.out.encode())
    assert cli.ok("training", "runs", "logs", run_id, "--attempt", "1").out == shown.out
    assert cli.ok("training", "runs", "logs", run_id, "-o", "json", "--jq", ".attempts").out == "[1]\n"


def test_follow_on_a_settled_run_prints_the_log_and_returns_at_once(completed_run, cli):
    run_id = completed_run["run"]["runId"]
    started = time.monotonic()
    followed = cli.ok("training", "runs", "logs", run_id, "--follow")
    assert time.monotonic() - started < 5
    assert followed.out == cli.ok("training", "runs", "logs", run_id).out


def test_an_attempt_or_a_job_that_does_not_exist_is_refused_naming_what_does(completed_run, cli, sqlite_server):
    run_id = completed_run["run"]["runId"]
    refused = cli("training", "runs", "logs", run_id, "--attempt", "9")
    assert refused.code == 1 and refused.out == ""
    assert f"run {run_id[:12]} has no attempt 9 with a log; its attempts with logs: 1" in refused.err
    assert "hint: ask for one of them (--attempt 1)" in refused.err
    assert cli("training", "runs", "logs", run_id, "--attempt", "0").code == 2  # a usage error
    for group, noun in (("runs", "run"), ("evaluations", "evaluation"), ("endpoints", "endpoint"),
                        ("datasets", "analysis")):
        unknown = cli("training", group, "logs", "feedfacefeed")
        assert unknown.code == 1 and f"{noun} 'feedfacefeed' does not exist" in unknown.err, unknown.err
    # the API: a 404 problem naming the attempts; a negative offset is malformed; paging from nextOffset
    url = f"{sqlite_server.url}/v1/training/runs/{run_id}/logs"
    problem = httpx.get(url, params={"attempt": 9}, headers=sqlite_server.headers)
    assert problem.status_code == 404 and problem.json()["attempts"] == [1]
    assert problem.headers["content-type"].startswith("application/problem+json")
    assert httpx.get(url, params={"offset": -1}, headers=sqlite_server.headers).status_code == 422
    whole = httpx.get(url, headers=sqlite_server.headers).json()
    rest = httpx.get(url, params={"offset": 10}, headers=sqlite_server.headers).json()
    assert rest["offset"] == 10 and rest["text"] == whole["text"].encode()[10:].decode()
    assert httpx.get(url, params={"offset": whole["size"]}, headers=sqlite_server.headers).json()["text"] == ""


def test_datasets_logs_reads_an_analysis_worker_log(completed_run, cli):
    dataset = f"{completed_run['project']}/chat:train"
    analysis = cli.json("training", "datasets", "analyze", dataset, "--model", "optimize/tiny-llama-3.2", "--wait")
    assert analysis["phase"] == "done", analysis
    answer = cli.json("training", "datasets", "logs", analysis["analysisId"][:8])
    assert answer["kind"] == "analysis" and answer["id"] == analysis["analysisId"] and answer["settled"]
    assert answer["attempt"] == answer["attempts"][-1] and answer["nextOffset"] == answer["size"]
    assert cli.ok("training", "datasets", "logs", analysis["analysisId"], "--follow").out == answer["text"]
