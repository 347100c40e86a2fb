"""A judge reward term (`kind: judge`, a model asked to grade each completion) in a GRPO run, through the CLI, on
the built-in stand-in on CPU: the stand-in grades its own completions (its random replies are mostly no score, so
the term mostly scores None, which TRL leaves out of its mean); the run completes and reports the term per update.
The judge is resolved and frozen at submission; a dry run says it is not checked on the server; a judge without a
model, a model the deployment does not have, and `model` on another kind are refused by field.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import Cli
from tests.run_fixtures import MODEL, YES_NO, prompts_project, write_plan

pytestmark = pytest.mark.integration

QUESTIONS = YES_NO[:4]


def judge_plan(project: str, judge: dict | None = None) -> dict:
    return {
        "kind": "run", "project": project, "baseModel": MODEL,
        "config": {"dataset": "prompts", "method": "grpo", "maxSeqLength": 256, "seed": 3,
                   "rlHyperparams": {"optimizer": {"learningRate": 0.02}, "maxCompletionLength": 4,
                                     "generations": 2, "training": {"maxSteps": 2, "batchSize": 2}},
                   "reward": {"terms": [{"kind": "regex", "pattern": r"^\W*[aeiouAEIOU]", "name": "vowel"},
                                        judge or {"kind": "judge", "model": MODEL, "name": "graded"}]}},
        "execution": {"deviceProfile": "cpu"},
    }


@pytest.fixture(scope="module")
def judge_project(sqlite_server, tmp_path_factory):
    return prompts_project(sqlite_server.url, tmp_path_factory.mktemp("judge"), "judge", QUESTIONS)


def test_a_grpo_run_with_a_judge_term_completes_and_reports_the_term(judge_project, capsys):
    cli = Cli(capsys, judge_project["url"])
    path = write_plan(judge_project["tmp"], judge_plan(judge_project["name"]))
    run = json.loads(cli.ok("training", "runs", "start", "-f", path, "--force", "--wait", "-o", "json").out)
    assert run["phase"] == "COMPLETED", run.get("failureReason")
    metrics = cli.json("training", "runs", "metrics", run["runId"])["steps"]
    assert len(metrics) == 2 and all("reward:graded" in m and "reward:vowel" in m for m in metrics), metrics
    assert set(run["results"]["rollouts"]["terms"]) == {"vowel", "graded"}
    settings = cli.json("training", "runs", "get", run["runId"], "--settings")["settings"]
    term = next(t for t in settings["config.reward.terms"]["value"] if t["name"] == "graded")
    assert term["judgeReference"] == MODEL and term["judgeBaseEntryId"] == MODEL and term["judgeBaseCommit"]
    assert term["judgeManifestDigest"] is None
    items = cli.json("training", "runs", "rollouts", run["runId"])["items"]
    assert items and all("graded" in item["scores"] for item in items)
    # the random stand-in's replies are mostly no score: such a completion's error quotes the reply
    unscored = [item for item in items if item["scores"]["graded"] is None]
    assert all("gave no score between 0 and 1" in item["errors"]["graded"] for item in unscored), unscored


def test_a_trained_adapter_judges_through_the_runs_lease(judge_project, completed_run, capsys):
    """A registered adapter as the judge: frozen at its exact version with its weights manifest, and downloaded by
    the run's worker (a blob its lease may read) to grade the completions."""
    cli = Cli(capsys, judge_project["url"])
    adapter = completed_run["run"]["results"]["model"]  # NS/NAME:vN
    unversioned = adapter.rsplit(":", 1)[0]
    path = write_plan(judge_project["tmp"], judge_plan(judge_project["name"],
                                                       {"kind": "judge", "model": unversioned, "name": "graded",
                                                        "instructions": 'Reply {"score": 1}.'}))
    run = json.loads(cli.ok("training", "runs", "start", "-f", path, "--force", "--wait", "-o", "json").out)
    assert run["phase"] == "COMPLETED", run.get("failureReason")
    settings = cli.json("training", "runs", "get", run["runId"], "--settings")["settings"]
    term = next(t for t in settings["config.reward.terms"]["value"] if t["name"] == "graded")
    assert term["judgeReference"] == adapter and term["judgeBaseEntryId"] == MODEL
    assert term["judgeManifestDigest"].startswith("sha256:") and term["model"] == unversioned
    metrics = cli.json("training", "runs", "metrics", run["runId"])["steps"]
    assert len(metrics) == 2 and all("reward:graded" in m for m in metrics)


def test_a_smoke_check_asks_the_judge_too(judge_project, capsys):
    """The smoke check scores its answers with the run's terms, the judge's among them: the random stand-in's
    replies hold no score, so no answer's total can be scored and the check fails with that reason (not a crash)."""
    cli = Cli(capsys, judge_project["url"])
    document = judge_plan(judge_project["name"])
    document["config"]["smoke"] = {"rows": 2, "steps": 1}
    run = json.loads(cli("training", "runs", "start", "-f", write_plan(judge_project["tmp"], document), "--force",
                         "--wait", "-o", "json").out)
    smoke = run["results"].get("smoke") or {}
    if run["phase"] == "COMPLETED":  # the judge happened to reply with a score for every answer
        assert smoke["status"] == "passed" and smoke["scored"] == 2
    else:
        assert run["failureReason"] == "the smoke check failed: none of the 2 answers could be scored", \
            run["failureReason"]
        assert smoke["status"] == "failed" and smoke["scored"] == 0


def test_the_dry_run_says_a_judge_term_is_not_checked_on_the_server(judge_project, capsys):
    cli = Cli(capsys, judge_project["url"])
    path = write_plan(judge_project["tmp"], judge_plan(judge_project["name"]))
    dry = cli.json("training", "runs", "start", "-f", path, "--force", "--dry-run")
    checked = {c["term"]: c for c in dry["rewardCheck"]}
    assert checked["vowel"]["rows"] == len(QUESTIONS) and checked["vowel"].get("checked", True)
    assert checked["graded"]["scored"] == 0 and checked["graded"]["checked"] is False
    assert "not checked on the server" in checked["graded"]["note"]
    terms = dry["resolved"]["config"]["reward"]["terms"]
    assert terms[1]["judgeReference"] == MODEL and terms[1]["judgeBaseCommit"]
    text = cli.ok("training", "runs", "start", "-f", path, "--force", "--dry-run").out
    assert f"graded (judge, weight 1)  not checked on the server: the judge {MODEL} is a model" in text, text


@pytest.mark.parametrize(("term", "words"), [
    ({"kind": "judge", "name": "graded"}, "config.reward.terms[1].model: a judge member needs the model"),
    ({"kind": "judge", "model": "nobody/no-such-judge"},
     "config.reward.terms[1].model: 'nobody/no-such-judge' is neither a base model selected on this deployment "
     "nor a registered model"),
    ({"kind": "judge", "model": "tiny-nothing"}, "config.reward.terms[1].model"),
    ({"kind": "regex", "pattern": "x", "model": MODEL}, "config.reward.terms[1].model: not an option of a regex "
                                                         "member"),
])
def test_a_judge_term_is_refused_by_field(judge_project, capsys, term, words):
    cli = Cli(capsys, judge_project["url"])
    path = write_plan(judge_project["tmp"], judge_plan(judge_project["name"], term))
    for extra in ((), ("--dry-run",)):
        refused = cli("training", "runs", "start", "-f", path, "--force", *extra)
        assert refused.code == 1 and words in refused.err, refused.err
    if term.get("model", "").startswith(("nobody", "tiny")):
        assert "akka training base-models select" in refused.err and "akka registry models list" in refused.err
