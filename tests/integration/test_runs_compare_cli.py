"""`akka training runs compare RUN BASELINE`, on the built-in stand-in on CPU: a short sft run (8 updates, another
learning rate) of the same rows as the session's completed run (16 updates), in a project of its own, is compared
against it window by window (`-o json` and text); a run of another dataset is refused as another plan unless
--across-plans.
"""

from __future__ import annotations

import pytest

from tests.conftest import Cli, write_jsonl
from tests.run_fixtures import capital_rows, capitals_project, plan, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def short_run(sqlite_server, completed_run, tmp_path_factory) -> dict:
    """An 8-update sft run of the completed run's rows and validation rows (copies registered in a project of its
    own: one plan, other hyperparams)."""
    from optimize.cli.main import main

    project = capitals_project(sqlite_server.url, tmp_path_factory.mktemp("compare"), "cmp", copies=4)
    name, client, tmp = project["name"], project["client"], project["tmp"]
    assert main(["registry", "datasets", "register", f"{name}/valid", "-f",
                 str(write_jsonl(tmp / "v.jsonl", capital_rows(4)[:8])), "--server", sqlite_server.url]) == 0
    document = plan(name, f"{name}/chat")
    document["config"]["hyperparams"] = {"optimizer": {"learningRate": 0.002},
                                         "training": {"maxSteps": 8, "batchSize": 4}}
    document["config"]["validation"] = {"dataset": f"{name}/valid"}
    document["execution"]["saveEvery"] = 8
    started = client.post("/v1/training/runs", json=document)
    assert started.status_code == 202, started.text
    run = wait_for(client, f"/v1/training/runs/{started.json()['runId']}", lambda r: r["phase"] == "COMPLETED",
                   fail_if=lambda r: r["phase"] in ("FAILED", "CANCELLED"))
    return {**project, "runId": run["runId"], "baselineId": completed_run["run"]["runId"]}


def test_compare_a_short_run_against_the_completed_run(sqlite_server, short_run, capsys):
    cli = Cli(capsys, sqlite_server.url)
    run_id, baseline_id = short_run["runId"], short_run["baselineId"]
    answer = cli.json("training", "runs", "compare", run_id[:12], baseline_id, "--window", "4")
    assert answer["run"]["runId"] == run_id and answer["baseline"]["runId"] == baseline_id
    assert (answer["run"]["updates"], answer["run"]["lastStep"]) == (8, 8)
    assert (answer["baseline"]["lastStep"], answer["baseline"]["phase"]) == (16, "COMPLETED")
    assert answer["planDifferences"] == [] and answer["acrossPlans"] is False
    # compared over the 8 updates both reached: two windows of 4
    assert [(w["runSteps"], w["baselineSteps"], w["updates"]) for w in answer["windows"]] == [
        ([1, 4], [1, 4], 4), ([5, 8], [5, 8], 4)]
    assert answer["windowsCompared"] == 2
    for w in answer["windows"]:
        assert w["difference"] == pytest.approx(w["runLoss"] - w["baselineLoss"])
    mean = sum(w["difference"] for w in answer["windows"]) / 2
    assert answer["meanDifference"] == pytest.approx(mean)
    assert answer["verdict"] == ("better" if mean < -0.05 else "worse" if mean > 0.05 else "same")
    assert answer["run"]["medianGradNorm"] > 0 and isinstance(answer["spikes"], list)
    for spike in answer["spikes"]:
        assert spike["gradNorm"] >= 3 * spike["median"]

    text = cli.ok("training", "runs", "compare", run_id, baseline_id, "--window", "4").out
    for expected in ("WINDOW", "STEPS", "RUN LOSS", "BASELINE LOSS", "DIFF", f"Run       {run_id[:12]}",
                     f"Baseline  {baseline_id[:12]}", "Gradient spikes", "First window beyond ±0.05",
                     f"Verdict: {answer['verdict']}", "over 2 windows"):
        assert expected in text, text

    by_tokens = cli.json("training", "runs", "compare", run_id, baseline_id, "--align", "tokens", "--window", "4")
    assert by_tokens["align"] == "tokens" and by_tokens["windows"]
    assert all(w["tokens"][0] < w["tokens"][1] for w in by_tokens["windows"])


def test_a_run_of_another_plan_is_refused_without_across_plans(sqlite_server, short_run, capsys):
    cli = Cli(capsys, sqlite_server.url)
    from optimize.cli.main import main

    name, client = short_run["name"], short_run["client"]
    assert main(["registry", "datasets", "register", f"{name}/other", "-f",
                 str(write_jsonl(short_run["tmp"] / "o.jsonl", capital_rows(1))), "--server", sqlite_server.url]) == 0
    other = client.post("/v1/training/runs", json=plan(name, f"{name}/other"))
    assert other.status_code == 202, other.text
    other_id = other.json()["runId"]
    try:
        refused = cli("training", "runs", "compare", other_id, short_run["runId"])
        assert refused.code != 0
        said = refused.err + refused.out
        assert "different plans" in said and "config.dataset" in said and f"{name}/other" in said, said
        assert "--across-plans" in said, said
        # across plans, it is no longer the plan that stops it (a run that has not trained yet is named instead)
        across = cli("training", "runs", "compare", other_id, short_run["runId"], "--across-plans")
        assert "different plans" not in across.err + across.out
    finally:
        client.post(f"/v1/training/runs/{other_id}/cancel")
