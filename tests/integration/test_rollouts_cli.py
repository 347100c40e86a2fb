"""`akka training runs rollouts RUN [--step N]`, on the built-in stand-in on CPU: a GRPO run of 3 updates (2 prompts
an update, 4 completions each) with two reward terms records a sample of every update's rollouts — each prompt's
last user message, every completion, each term's score and the weighted total — which its worker sends beside its
metrics. The newest step shows by default and `--step 1` the first; an unrecorded step is refused naming the
recorded ones; a supervised run is refused naming its method; `-o json` answers the documented shape; a worker
without the run's lease cannot write rollouts.
"""

from __future__ import annotations

import json
import uuid

import pytest

from optimize.cli.safe_text import escape_controls
from tests.conftest import Cli, chat_row, from_standin, headers_for, write_jsonl
from tests.run_fixtures import MODEL

pytestmark = pytest.mark.integration

QUESTIONS = ["Is the sky blue?\nAnswer in one word.", "Is water wet?", "Is fire cold?", "Is ice hot?",
             "Do fish swim?", "Do birds fly?"]
WEIGHTS = {"vowel": 1.0, "length": 0.5}


def rollouts_plan(project: str) -> dict:
    return {
        "kind": "run", "project": project, "baseModel": MODEL,
        "config": {"dataset": "prompts", "method": "grpo", "maxSeqLength": 256, "seed": 5,
                   "rlHyperparams": {"optimizer": {"learningRate": 0.02}, "maxCompletionLength": 6,
                                     "generations": 4, "training": {"maxSteps": 3, "batchSize": 2}},
                   "reward": {"terms": [{"kind": "regex", "pattern": r"^\W*[aeiouAEIOU]", "name": "vowel",
                                         "weight": WEIGHTS["vowel"]},
                                        {"kind": "length", "target": 4, "max": 40, "name": "length",
                                         "weight": WEIGHTS["length"]}]}},
        "execution": {"deviceProfile": "cpu"},
    }


@pytest.fixture(scope="module")
def grpo_run(sqlite_server, tmp_path_factory):
    import httpx

    from optimize.cli.main import main

    url = sqlite_server.url
    name = f"ro{uuid.uuid4().hex[:8]}"
    tmp = tmp_path_factory.mktemp("rollouts")
    client = httpx.Client(base_url=url, headers=headers_for(url), timeout=600)
    client.post(f"/v1/training/base-models/{MODEL}/select", json=from_standin(MODEL)).raise_for_status()
    client.post("/v1/training/projects", json={"name": name}).raise_for_status()
    rows = [chat_row(q, "yes" if i % 2 == 0 else "no") for i, q in enumerate(QUESTIONS)]
    assert main(["registry", "datasets", "register", f"{name}/prompts", "-f", str(write_jsonl(tmp / "p.jsonl", rows)),
                 "--server", url, "-o", "json"]) == 0
    started = client.post("/v1/training/runs", json=rollouts_plan(name))
    assert started.status_code == 202, started.text
    run_id = started.json()["runId"]
    assert main(["training", "runs", "wait", run_id, "--exit-status", "--server", url, "-o", "json"]) == 0
    return {"url": url, "runId": run_id, "client": client}


def _weighted(scores: dict) -> float | None:
    present = [WEIGHTS[name] * value for name, value in scores.items() if value is not None]
    return sum(present) if present else None


def _check_items(items: list[dict]) -> None:
    assert len(items) == 8  # the first 2 prompt groups of the update, 4 completions each
    assert [item["group"] for item in items] == [0] * 4 + [1] * 4
    for item in items:
        assert item["prompt"] in QUESTIONS
        assert isinstance(item["completion"], str)
        assert set(item["scores"]) == {"vowel", "length"}
        assert item["scores"]["vowel"] in (0.0, 1.0)
        assert item["total"] == pytest.approx(_weighted(item["scores"]))
    for group in (items[:4], items[4:]):  # the completions of one prompt
        assert len({item["prompt"] for item in group}) == 1


def _check_text(text: str, answer: dict) -> None:
    for item in answer["items"]:
        assert escape_controls(item["prompt"].splitlines()[0]) in text
        for word in item["completion"].split():
            assert escape_controls(word) in text, (word, text)
        assert f"vowel {item['scores']['vowel']:.3f}" in text
        assert f"length {item['scores']['length']:.3f}" in text
        assert f"total {item['total']:.3f}" in text
    assert "Prompt 1" in text and "Prompt 2" in text
    assert f"Step {answer['step']} of steps recorded 1-3; another with --step N." in text, text


def test_the_newest_step_shows_prompts_completions_and_each_terms_score(grpo_run, capsys):
    cli = Cli(capsys, grpo_run["url"])
    answer = cli.json("training", "runs", "rollouts", grpo_run["runId"][:12])
    assert answer["runId"] == grpo_run["runId"] and answer["method"] == "grpo"
    assert answer["steps"] == [1, 2, 3] and answer["step"] == 3 and answer["attempt"] == 1
    assert answer["terms"] == [{"name": "vowel", "weight": 1.0}, {"name": "length", "weight": 0.5}]
    assert set(answer) >= {"runId", "method", "phase", "terms", "steps", "step", "attempt", "recordedAt", "items"}
    _check_items(answer["items"])
    text = cli.ok("training", "runs", "rollouts", grpo_run["runId"][:12]).out
    print(text)
    assert f"Run {grpo_run['runId'][:12]} (grpo), step 3: 8 completion(s) of 2 prompt(s); " \
           "total = vowel ×1, length ×0.5" in text, text
    _check_text(text, answer)


def test_an_earlier_step_is_shown_with_step(grpo_run, capsys):
    cli = Cli(capsys, grpo_run["url"])
    answer = cli.json("training", "runs", "rollouts", grpo_run["runId"], "--step", "1")
    assert answer["step"] == 1 and answer["steps"] == [1, 2, 3]
    _check_items(answer["items"])
    newest = cli.json("training", "runs", "rollouts", grpo_run["runId"])
    assert answer["items"] != newest["items"]  # another update's rollouts
    _check_text(cli.ok("training", "runs", "rollouts", grpo_run["runId"], "--step", "1").out, answer)


def test_an_unrecorded_step_is_refused_naming_the_recorded_ones(grpo_run, capsys):
    cli = Cli(capsys, grpo_run["url"])
    refused = cli("training", "runs", "rollouts", grpo_run["runId"], "--step", "7")
    assert refused.code == 1
    assert f"run {grpo_run['runId'][:12]} recorded no rollouts at step 7; the steps recorded are 1-3" in refused.err
    answer = grpo_run["client"].get(f"/v1/training/runs/{grpo_run['runId']}/rollouts", params={"step": 0})
    assert answer.status_code == 404 and "the steps recorded are 1-3" in answer.json()["detail"], answer.text
    assert grpo_run["client"].get("/v1/training/runs/ffffffffffff/rollouts").status_code == 404
    assert grpo_run["client"].get(f"/v1/training/runs/{grpo_run['runId']}/rollouts",
                                  params={"step": "x"}).status_code == 422


def test_a_supervised_run_is_refused_naming_its_method(completed_run, capsys):
    cli = Cli(capsys, completed_run["url"])
    run_id = completed_run["run"]["runId"]
    refused = cli("training", "runs", "rollouts", run_id)
    assert refused.code == 1
    assert f"run {run_id[:12]} is an sft run; rollouts are recorded for grpo and gspo runs" in refused.err, refused.err
    answer = completed_run["client"].get(f"/v1/training/runs/{run_id}/rollouts")
    assert answer.status_code == 400, answer.text


def test_a_worker_without_the_lease_cannot_write_rollouts(grpo_run):
    import httpx

    answer = httpx.post(f"{grpo_run['url']}/v1/internal/jobs/run/{grpo_run['runId']}/rollouts",
                        headers={"X-Lease-Token": "not-the-lease"},
                        json={"records": [{"step": 1, "items": [{"prompt": "x", "completion": "y"}]}]})
    assert answer.status_code == 409, answer.text
    assert json.loads(answer.text)["code"] == "lease_lost"
