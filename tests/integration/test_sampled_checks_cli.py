"""Sampled answers, through the CLI against a real server and worker on the tiny stand-in: a sampling evaluation
(`--generations N`) asks each of the first rows for several answers at a temperature and grades every one; `akka
registry bundles check --model` starts one on the check's rows and reports the share of prompts whose answers all
scored the same (what a GRPO update cannot learn from), warning when it is most of them."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from tests.conftest import Cli, chat_row, from_standin, write_jsonl
from tests.run_fixtures import MODEL, write_plan

pytestmark = pytest.mark.integration

# half the stand-in's tokens start with one of these: its sampled answers score 1 or 0, varying within a prompt
VARIED = '''def compute_score(prompt, completion, fields):
    return 1.0 if completion[:1].lower() in "abcdefghijklm" else 0.0
'''
CONSTANT = '''def compute_score(prompt, completion, fields):
    return 1.0
'''


@pytest.fixture(scope="module")
def sampled(sqlite_server, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sampled")
    name = f"sc{uuid.uuid4().hex[:8]}"
    client = httpx.Client(base_url=sqlite_server.url, headers=sqlite_server.headers, timeout=600)
    client.post(f"/v1/training/base-models/{MODEL}/select", json=from_standin(MODEL)).raise_for_status()
    client.post("/v1/training/projects", json={"name": name}).raise_for_status()
    rows = [chat_row(q, "ok") for q in ("Say ok", "Say yes", "Say no", "Say hi", "Say bye")]
    from optimize.cli.main import main

    for module, text in (("varied", VARIED), ("constant", CONSTANT)):
        (tmp / module).mkdir()
        (tmp / module / "reward.py").write_text(text)
        assert main(["registry", "bundles", "register", f"{name}/{module}", "-f", str(tmp / module),
                     "--server", sqlite_server.url]) == 0
    assert main(["registry", "datasets", "register", f"{name}/asks", "-f", str(write_jsonl(tmp / "a.jsonl", rows)),
                 "--server", sqlite_server.url]) == 0
    return name


def test_a_sampling_evaluation_grades_every_answer_of_each_group(sampled, sqlite_server, capsys):
    cli = Cli(capsys, sqlite_server.url)
    done = json.loads(cli.ok("training", "evaluations", "start", "--model", MODEL, "--project", sampled,
                             "--dataset", f"{sampled}/asks", "--grader", f"bundle:{sampled}/varied#reward",
                             "--generations", "4", "--temperature", "1.0", "--rows", "3", "--max-new-tokens", "4",
                             "--wait", "--exit-status", "-o", "json-compact").out.splitlines()[-1])
    assert done["sampling"] == {"generations": 4, "temperature": 1.0, "seed": 0} and done["rows"] == 3
    assert done["progress"] == {"answered": 3, "total": 3}
    spread = done["report"]["sampling"]
    assert spread["answers"] == 12 and spread["groups"] == 3 and done["report"]["scored"] == 12
    assert 0 <= spread["zeroVarianceShare"] <= 1 and spread["std"] is not None
    predictions = cli.json("training", "evaluations", "predictions", done["evaluationId"])["predictions"]
    assert [p["line"] for p in predictions] == [1, 2, 3]
    for p in predictions:  # the row's score is its group's mean; its answer the group's first
        scores = [s["score"] for s in p["samples"]]
        assert len(scores) == 4 and p["score"] == pytest.approx(sum(scores) / 4)
        assert p["answer"] == p["samples"][0]["answer"]
    text = cli.ok("training", "evaluations", "get", done["evaluationId"]).out
    assert "Asked       the first 3 rows, 4 answers each sampled at temperature 1 (seed 0)" in text, text
    assert "Groups      12 answers, score std" in text and "of 3 prompt(s)" in text
    # the same seed samples the same answers
    again = json.loads(cli.ok("training", "evaluations", "start", "--model", MODEL, "--project", sampled,
                              "--dataset", f"{sampled}/asks", "--grader", f"bundle:{sampled}/varied#reward",
                              "--generations", "4", "--temperature", "1.0", "--rows", "3", "--max-new-tokens", "4",
                              "--wait", "-o", "json-compact").out.splitlines()[-1])
    repeated = cli.json("training", "evaluations", "predictions", again["evaluationId"])["predictions"]
    assert [p["samples"] for p in repeated] == [p["samples"] for p in predictions]
    # a sampling evaluation is no column of the scores table (it measures sampled answers to the first rows)
    assert cli.json("training", "projects", "scores", sampled)["groups"] == []


@pytest.mark.parametrize("options, words", [
    (["--generations", "4", "--temperature", "0"], "4 generations at temperature 0 would be 4 copies of the greedy"),
    (["--generations", "17"], "generations must be an integer from 1 to 16"),
    (["--temperature", "3"], "temperature must be a number from 0 to 2"),
    (["--rows", "0"], "rows must be a positive integer"),
])
def test_a_sampling_evaluation_is_refused_by_field(sampled, sqlite_server, capsys, options, words):
    cli = Cli(capsys, sqlite_server.url)
    refused = cli("training", "evaluations", "start", "--model", MODEL, "--project", sampled, "--dataset",
                  f"{sampled}/asks", *options)
    assert refused.code == 1 and words in refused.err, refused.err


def test_a_bundle_check_with_a_model_measures_the_groups_that_do_not_vary(sampled, sqlite_server, capsys):
    cli = Cli(capsys, sqlite_server.url)
    report = json.loads(cli.ok("registry", "bundles", "check", f"{sampled}/varied", "--dataset", f"{sampled}/asks",
                               "--model", MODEL, "--project", sampled, "--samples", "4", "--temperature", "1.0",
                               "--max-new-tokens", "4", "-o", "json").out)
    sampling = report["sampling"]
    assert sampling["model"] == MODEL and sampling["generations"] == 4 and sampling["rows"] == 4
    evaluation = sampling["evaluation"]
    assert evaluation["phase"] == "COMPLETED"
    assert evaluation["grader"] == f"bundle:{sampled}/varied:v1#reward:compute_score"
    assert evaluation["report"]["sampling"]["answers"] == 16
    assert report["zeroVarianceShare"] is None and not any("zeroVarianceShare" in n for n in report["notes"])

    text = cli.ok("registry", "bundles", "check", f"{sampled}/constant", "--dataset", f"{sampled}/asks",
                  "--model", MODEL, "--project", sampled, "--samples", "3", "--max-new-tokens", "4").out
    assert f"Sampled   {MODEL}, 4 answers per prompt at temperature 0.7" in text, text
    assert "Answers   mean 1  std 0  12 scored, 0 unscored or errors" in text
    assert "zero-variance share 100% of 3 prompt(s)" in text
    assert "Warning   on 100% of the prompts every sampled answer scored the same" in text
    # a base model names no project: the check's sampling needs one
    refused = cli("registry", "bundles", "check", f"{sampled}/constant", "--dataset", f"{sampled}/asks",
                  "--model", MODEL)
    assert refused.code == 1 and "project" in refused.err, refused.err


def grpo_plan(project: str, dataset: str, pattern: str) -> dict:
    return {"kind": "run", "project": project, "baseModel": MODEL,
            "config": {"dataset": dataset, "method": "grpo", "maxSeqLength": 256,
                       "rlHyperparams": {"maxCompletionLength": 4, "training": {"maxSteps": 2, "batchSize": 2}},
                       "reward": {"terms": [{"kind": "regex", "pattern": pattern, "name": "shape"}]}},
            "execution": {"deviceProfile": "cpu"}}


def test_the_dry_run_scores_the_sampled_groups_with_the_runs_reward(sampled, sqlite_server, capsys, tmp_path):
    """The dry run re-scores the newest sampling evaluation's answers (from the bundle checks above) with the run's
    own reward: a reward every answer earns is constant on every group, and warned; without sampled answers the dry
    run says how to make them."""
    cli = Cli(capsys, sqlite_server.url)
    constant = cli.json("training", "runs", "start", "-f", write_plan(tmp_path, grpo_plan(sampled, "asks", ".|^$")),
                        "--dry-run")
    groups = constant["groupsCheck"]
    assert groups["model"] == MODEL and groups["zeroVarianceShare"] == 1.0 and groups["meanReward"] == 1.0
    assert groups["prompts"] == groups["groups"] == 3 and groups["answers"] == 12  # the newest: 3 rows x 4
    assert any(w.startswith("the reward is constant on 100% of the 3 prompt groups sampled from") and
               groups["evaluationId"][:12] in w for w in constant["warnings"]), constant["warnings"]
    text = cli.ok("training", "runs", "start", "-f", write_plan(tmp_path, grpo_plan(sampled, "asks", ".|^$")),
                  "--dry-run").out
    assert "Groups       reward constant on 100% of 3 prompt groups, mean reward 1.000" in text, text
    assert "Warning      the reward is constant on 100%" in text

    varied = cli.json("training", "runs", "start", "-f", write_plan(tmp_path, grpo_plan(sampled, "asks", "^[a-m]")),
                      "--dry-run")
    assert varied["groupsCheck"]["zeroVarianceShare"] < 1.0
    assert not any("the reward is constant" in w for w in varied["warnings"])

    cli.ok("registry", "datasets", "register", f"{sampled}/fresh", "-f",
           str(write_jsonl(tmp_path / "f.jsonl", [chat_row("Say what", "ok"), chat_row("Say so", "ok")])))
    text = cli.ok("training", "runs", "start", "-f", write_plan(tmp_path, grpo_plan(sampled, "fresh", "^[a-m]")),
                  "--dry-run").out
    assert f"Groups       not measured: no sampling evaluation of {MODEL} on this dataset version" in text, text
    assert (f"akka training evaluations start --model {MODEL} --project {sampled} --dataset {sampled}/fresh:v1 "
            "--generations 4 --temperature 0.7 --rows 64 --max-new-tokens 4 --wait") in text


def test_the_dry_run_estimates_a_reinforcement_runs_updates_and_rollouts(sampled, sqlite_server, capsys, tmp_path):
    """5 rows, 2 prompts an update, 4 completions each: 3 updates an epoch, 2 epochs; tokens and time once the
    dataset's analysis is done (tokens: the rows' lengths times the generations), with no grpo throughput measured
    for the stand-in."""
    cli = Cli(capsys, sqlite_server.url)
    document = grpo_plan(sampled, "asks", "^[a-m]")
    document["config"]["rlHyperparams"]["training"] = {"epochs": 2, "batchSize": 2}
    dry = cli.json("training", "runs", "start", "-f", write_plan(tmp_path, document), "--dry-run")
    estimates = dry["estimates"]
    assert (estimates["stepsPerEpoch"], estimates["steps"], estimates["tokens"], estimates["seconds"]) == (3, 6, None,
                                                                                                           None)
    assert estimates["rollouts"] == {"promptsPerUpdate": 2, "completionsPerUpdate": 8, "completions": 48,
                                     "mostCompletionTokens": 192}
    assert {"field": "config.rlHyperparams.generations", "value": 4, "source": "default"} in estimates["inputs"]
    text = cli.ok("training", "runs", "start", "-f", write_plan(tmp_path, document), "--dry-run").out
    assert ("Estimate     6 updates (3 per epoch), each rolling out 2 prompts x 4 = 8 completions: 48 completions, "
            "at most 192 generated tokens") in text, text
    assert "no analysis of the training dataset is done, so there is no token or time estimate" in text

    cli.ok("training", "datasets", "analyze", f"{sampled}/asks", "--model", MODEL, "--wait")
    analyzed = cli.json("training", "runs", "start", "-f", write_plan(tmp_path, document), "--dry-run")["estimates"]
    assert analyzed["tokens"] > 0 and analyzed["seconds"] is None
    assert analyzed["basis"] == f"no throughput is measured for grpo on cpu for {MODEL}, so there is no time estimate"


def test_the_built_in_members_grade_an_evaluation(sampled, sqlite_server, capsys):
    """exact, contains, regex:PATTERN and numeric[:TOLERANCE], a reward term's own members, as graders: each answer
    scored 1 or 0 with what was compared; a row without a number to compare leaves numeric unscored."""
    cli = Cli(capsys, sqlite_server.url)

    def evaluate(grader: str) -> tuple[dict, list[dict]]:
        done = json.loads(cli.ok("training", "evaluations", "start", "--model", MODEL, "--project", sampled,
                                 "--dataset", f"{sampled}/asks", "--grader", grader, "--rows", "3",
                                 "--max-new-tokens", "4", "--wait", "--exit-status", "-o", "json-compact"
                                 ).out.splitlines()[-1])
        return done, cli.json("training", "evaluations", "predictions", done["evaluationId"])["predictions"]

    done, answers = evaluate("regex:.|^$")  # every answer matches
    assert done["grader"] == "regex:.|^$" and done["report"]["meanScore"] == 1.0
    assert {p["explanation"] for p in answers} == {"regex:.|^$: matches"}
    done, answers = evaluate("contains")
    assert done["report"]["scored"] == 3 and {p["score"] for p in answers} <= {0.0, 1.0}
    assert all(p["explanation"].startswith("contains: ") for p in answers)
    done, answers = evaluate("numeric:0.5")  # the rows answer "ok": no number to compare with
    assert done["grader"] == "numeric:0.5" and done["report"]["scored"] == 0 and done["report"]["unscored"] == 3
    assert answers[0]["explanation"] == "unscored: the row holds no reference for numeric:0.5 to compare with"


@pytest.mark.parametrize("grader, words", [
    ("regex:(", "grader 'regex:(': grader.pattern"),
    ("numeric:-1", "grader 'numeric:-1': the tolerance must be a number of 0 or more"),
    ("length", "grader 'length' is a penalty from -1 to 0"),
    ("exact:x", "is not one of json-label-match, exact, contains, regex:PATTERN, numeric[:TOLERANCE]"),
    ("regex:" + "a" * 500, "a grader is at most 400"),
])
def test_a_built_in_grader_is_refused_by_its_fault(sampled, sqlite_server, capsys, grader, words):
    cli = Cli(capsys, sqlite_server.url)
    refused = cli("training", "evaluations", "start", "--model", MODEL, "--project", sampled, "--dataset",
                  f"{sampled}/asks", "--grader", grader)
    assert refused.code == 1 and words in refused.err, refused.err
