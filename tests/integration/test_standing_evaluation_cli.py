"""A project's standing evaluation at work, on SQLite and PostgreSQL, with a real server and real workers: a model
version the project registers after it was set (an adapter imported) is evaluated by itself, once, on the held-out
dataset with the grader — an ordinary evaluation of the project — and its score shows as the held-out score in
`akka registry models versions` and `get`; a version registered before it was set is not evaluated."""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import Cli, built_standin, chat_row, from_standin, write_jsonl
from tests.integration.test_adapter_import_cli import MODEL, peft_adapter

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def adapter(tmp_path_factory):
    """A LoRA adapter made on the stand-in by a bare PEFT script, once for the module."""
    made = tmp_path_factory.mktemp("standing-adapter") / "made"
    peft_adapter(str(built_standin(MODEL)), made)
    return made


def scored(cli: Cli, model: str, deadline: float) -> dict:
    """The newest version's standing score once its evaluation has ended."""
    while True:
        version = cli.json("registry", "models", "versions", model)["versions"][0]
        score = version["standingScore"]
        if score and (score["refusal"] or score["phase"] in ("COMPLETED", "FAILED", "CANCELLED")):
            return version
        assert time.monotonic() < deadline, version
        time.sleep(0.3)


def test_a_version_registered_after_it_was_set_is_evaluated_by_itself_once(server, ns, adapter, tmp_path, capsys):
    cli = Cli(capsys, server.url)
    cli.ok("training", "base-models", "select", MODEL, "--from", from_standin(MODEL)["from"])
    cli.ok("training", "projects", "create", ns)
    rows = [chat_row("Label this ticket: my invoice is wrong", json.dumps({"label": "billing"})),
            chat_row("Label this ticket: where is my parcel", json.dumps({"label": "shipping"}))]
    cli.ok("registry", "datasets", "register", f"{ns}/held-out", "-f", str(write_jsonl(tmp_path / "h.jsonl", rows)))
    cli.ok("registry", "adapters", "import", f"{ns}/early", "-f", str(adapter), "--base", MODEL)  # before: never

    held = cli.json("training", "projects", "set-evaluation", ns, "--dataset", f"{ns}/held-out")
    assert held["standingEvaluation"]["dataset"] == f"{ns}/held-out"
    imported = cli.json("registry", "adapters", "import", f"{ns}/labeller", "-f", str(adapter), "--base", MODEL)
    assert imported["reference"] == f"{ns}/labeller:v1"

    version = scored(cli, f"{ns}/labeller", time.monotonic() + 180)
    score = version["standingScore"]
    assert score["phase"] == "COMPLETED" and score["refusal"] is None, score
    assert (score["dataset"], score["grader"]) == (f"{ns}/held-out:v1", "json-label-match")
    assert isinstance(score["meanScore"], (int, float)) and 0 <= score["meanScore"] <= 1

    # an ordinary evaluation of the project, of that exact version, on the held-out dataset
    evaluations = cli.json("training", "evaluations", "list", "--project", ns)["evaluations"]
    assert [(e["evaluationId"], e["model"], e["dataset"]["reference"], e["grader"]) for e in evaluations] == [
        (score["evaluationId"], f"{ns}/labeller:v1", f"{ns}/held-out:v1", "json-label-match")]
    evaluation = cli.json("training", "evaluations", "get", score["evaluationId"][:12])
    assert evaluation["report"]["meanScore"] == score["meanScore"] and evaluation["report"]["scored"] == 2

    text = cli.ok("registry", "models", "versions", f"{ns}/labeller").out
    assert "HELD-OUT SCORE" in text and f"{score['meanScore']:.3f}" in text
    assert f"Held-out score: the project's standing evaluation on {ns}/held-out:v1 with json-label-match" in text
    got = cli.json("registry", "models", "get", f"{ns}/labeller")
    assert got["standingScore"] == score and got["versions"][0]["standingScore"] == score
    assert cli.json("registry", "models", "get", f"{ns}/labeller:v1")["standingScore"] == score
    assert "HELD-OUT SCORE" in cli.ok("registry", "models", "get", f"{ns}/labeller").out

    # registered before it was set: never evaluated, shown without a held-out score
    assert cli.json("registry", "models", "versions", f"{ns}/early")["versions"][0]["standingScore"] is None
    assert "HELD-OUT SCORE" not in cli.ok("registry", "models", "versions", f"{ns}/early").out

    # once per version, dataset and grader: the ticks since start nothing more, the same adapter again is the same
    # version, and clearing it leaves the evaluation and its score as they are
    again = cli.json("registry", "adapters", "import", f"{ns}/labeller", "-f", str(adapter), "--base", MODEL)
    assert again["created"] is False
    time.sleep(2.5)
    assert len(cli.json("training", "evaluations", "list", "--project", ns)["evaluations"]) == 1
    cli.ok("training", "projects", "set-evaluation", ns, "--clear")
    assert cli.json("registry", "models", "versions", f"{ns}/labeller")["versions"][0]["standingScore"] == score


def test_a_refused_start_is_remembered_with_its_reason_not_retried_every_tick(server_factory, ns, adapter, tmp_path,
                                                                              capsys):
    import sqlite3

    proc = server_factory("quota", env={"OPTIMIZE_PROJECT_QUOTAS": json.dumps({ns: {"queuedWork": 0}})})
    cli = Cli(capsys, proc.url)
    cli.ok("training", "base-models", "select", MODEL, "--from", from_standin(MODEL)["from"])
    cli.ok("training", "projects", "create", ns)
    rows = [chat_row("Label this ticket: my invoice is wrong", json.dumps({"label": "billing"}))]
    cli.ok("registry", "datasets", "register", f"{ns}/held-out", "-f", str(write_jsonl(tmp_path / "h.jsonl", rows)))
    cli.ok("training", "projects", "set-evaluation", ns, "--dataset", "held-out", "--grader", "exact")
    cli.ok("registry", "adapters", "import", f"{ns}/labeller", "-f", str(adapter), "--base", MODEL)

    version = scored(cli, f"{ns}/labeller", time.monotonic() + 60)
    score = version["standingScore"]
    assert (score["evaluationId"], score["phase"], score["meanScore"]) == (None, None, None)
    assert (score["dataset"], score["grader"]) == ("held-out", "exact")  # as the project holds them
    assert f"project {ns} already has 0 items of work waiting for devices, its quota queuedWork (0)" in score["refusal"]
    text = cli.ok("registry", "models", "versions", f"{ns}/labeller").out
    assert "refused" in text and f"{ns}/labeller:v1: its standing evaluation was refused: project {ns}" in text

    time.sleep(3)  # ticks go by: the refusal is kept, not tried again every second
    with sqlite3.connect(proc.data_dir / "optimize.db") as db:
        assert db.execute("SELECT attempts, evaluation_id FROM standing_evaluations").fetchall() == [(1, None)]
    assert cli.json("training", "evaluations", "list", "--project", ns)["evaluations"] == []
