"""A scoring bundle's function as an evaluation's grader (`--grader bundle:NS/NAME#MODULE[:FUNCTION]`), through the
CLI against a real server and worker on the stand-in model: the reference is resolved to its exact version at
submission, the bundle is imported there (a bundle that cannot import is refused before anything is queued), and
the worker downloads the archive through its lease and scores every answer in a limited child process. A row the
function does not apply to (None) and one it raises on are unscored, out of the mean, with the reason."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from tests.conftest import Cli, chat_row, from_standin, write_jsonl
from tests.run_fixtures import MODEL, followed

pytestmark = pytest.mark.integration

REWARD = '''from . import helpers


def compute_score(prompt_messages, completion_text, fields):
    if fields.get("explode"):
        raise ValueError("marked to fail")
    if fields.get("skip"):
        return None
    # what the grader is given: the prompt's messages, the answer's text, the row's fields and its expected answer
    assert prompt_messages[-1] == {"role": "user", "content": "Say ok"}, prompt_messages
    assert isinstance(completion_text, str) and fields["expected"] == "ok", fields
    return helpers.weight(fields["kind"])
'''
HELPERS = '''import json
from pathlib import Path

WEIGHTS = json.loads((Path(__file__).parent / "tables" / "weights.json").read_text())


def weight(kind):
    return WEIGHTS[kind]
'''


@pytest.fixture(scope="module")
def scoring(sqlite_server, tmp_path_factory):
    """A project, a four-row dataset (scored 1.0, scored 0.5, skipped, raising) and two bundles: one that scores,
    with a relative sibling import and a data file, and one whose module cannot import."""
    tmp = tmp_path_factory.mktemp("bundle-grader")
    name = f"bg{uuid.uuid4().hex[:8]}"
    client = httpx.Client(base_url=sqlite_server.url, headers=sqlite_server.headers, timeout=600)
    client.post(f"/v1/training/base-models/{MODEL}/select", json=from_standin(MODEL)).raise_for_status()
    client.post("/v1/training/projects", json={"name": name}).raise_for_status()
    rows = [chat_row("Say ok", "ok", kind="good"), chat_row("Say ok", "ok", kind="half"),
            chat_row("Say ok", "ok", skip=True), chat_row("Say ok", "ok", explode=True)]
    good = tmp / "scorer"
    (good / "tables").mkdir(parents=True)
    (good / "reward.py").write_text(REWARD)
    (good / "helpers.py").write_text(HELPERS)
    (good / "tables" / "weights.json").write_text(json.dumps({"good": 1.0, "half": 0.5}))
    broken = tmp / "broken"
    broken.mkdir()
    (broken / "reward.py").write_text("import not_a_module_anywhere\n")
    from optimize.cli.main import main

    for args in (["registry", "datasets", "register", f"{name}/asks", "-f", str(write_jsonl(tmp / "a.jsonl", rows))],
                 ["registry", "bundles", "register", f"{name}/scorer", "-f", str(good)],
                 ["registry", "bundles", "register", f"{name}/broken", "-f", str(broken)]):
        assert main([*args, "--server", sqlite_server.url]) == 0
    return {"name": name, "client": client}


def test_a_bundle_function_grades_each_answer_and_its_errors_leave_examples_unscored(scoring, sqlite_server, capsys):
    cli, name = Cli(capsys, sqlite_server.url), scoring["name"]
    done = followed(cli, "training", "evaluations", "start", "--model", MODEL, "--dataset", f"{name}/asks",
                    "--project", name, "--grader", f"bundle:{name}/scorer#reward:compute_score",
                    "--max-new-tokens", "4", "--wait", "--exit-status")
    assert done["phase"] == "COMPLETED", done["failureReason"]
    assert done["grader"] == f"bundle:{name}/scorer:v1#reward:compute_score"  # the exact version, kept
    report = done["report"]
    assert report["meanScore"] == 0.75 and report["scored"] == 2 and report["unscored"] == 2, report
    assert report["exactMatchRate"] == 0.5
    answers = cli.json("training", "evaluations", "predictions", done["evaluationId"])["predictions"]
    assert [p["score"] for p in answers] == [1.0, 0.5, None, None]
    assert answers[2]["explanation"] == ("unscored: reward:compute_score returned None (it does not apply to this "
                                         "example)")
    assert answers[3]["explanation"].startswith("unscored: ValueError: marked to fail (reward.py line "), answers[3]
    text = cli.ok("training", "evaluations", "get", done["evaluationId"][:10]).out
    assert f"bundle:{name}/scorer:v1#reward:compute_score" in text and "2 unscored" in text

    # the scores table names the bundle's version, and takes the grader as the evaluation keeps it, or as it was
    # asked for (the latest version, compute_score)
    for asked in (done["grader"], f"bundle:{name}/scorer#reward"):
        table = cli.json("training", "projects", "scores", name, "--grader", asked)
        assert table["grader"] == done["grader"]
        assert table["groups"][0]["baseline"]["meanScore"] == 0.75

    # a FUNCTION left out is compute_score, and the same grader is kept in the same spelling
    again = cli.json("training", "evaluations", "start", "--model", MODEL, "--dataset", f"{name}/asks",
                     "--project", name, "--grader", f"bundle:{name}/scorer:latest#reward")
    assert again["grader"] == done["grader"]
    cli.ok("training", "evaluations", "cancel", again["evaluationId"])


@pytest.mark.parametrize("grader, words", [
    ("bundle:{name}/broken#reward", ["importing module reward of the scoring bundle {name}/broken:v1",
                                     "not_a_module_anywhere"]),
    ("bundle:{name}/scorer#rewards", ["the scoring bundle {name}/scorer:v1 has no module rewards",
                                      "helpers.py, reward.py, tables/"]),
    ("bundle:{name}/scorer#reward:nope", ["module reward of the scoring bundle {name}/scorer:v1 has no function nope",
                                          "compute_score"]),
    ("bundle:{name}/missing#reward", ["needs a scoring bundle the registry does not hold: bundle {name}/missing does "
                                      "not exist", "akka registry bundles register {name}/missing -f DIR_OR_ZIP"]),
    ("bundle:{name}/scorer:v9#reward", ["bundle {name}/scorer has no version v9"]),
    ("bundle:{name}/scorer", ["grader 'bundle:{name}/scorer' names no module of the bundle",
                              "bundle:NS/NAME[:vN|:ALIAS]#MODULE[:FUNCTION]", "--grader bundle:{name}/scorer#reward"]),
    ("bundle:{name}#reward", ["grader 'bundle:{name}#reward'", "bundle:NS/NAME[:vN|:ALIAS]#MODULE[:FUNCTION]"]),
    ("bundle:{name}/scorer#reward.py", ["names a file", "bundle:NS/NAME[:vN|:ALIAS]#MODULE[:FUNCTION]"]),
])
def test_a_bundle_grader_that_cannot_score_is_refused_at_submission(scoring, sqlite_server, capsys, grader, words):
    cli, name, client = Cli(capsys, sqlite_server.url), scoring["name"], scoring["client"]
    before = len(client.get("/v1/training/evaluations", params={"project": name}).json()["evaluations"])
    refused = cli("training", "evaluations", "start", "--model", MODEL, "--dataset", f"{name}/asks", "--project",
                  name, "--grader", grader.format(name=name))
    assert refused.code == 1
    for word in words:
        assert word.format(name=name) in refused.err, refused.err
    assert len(client.get("/v1/training/evaluations", params={"project": name}).json()["evaluations"]) == before
