"""Runs sharing one loaded base (`execution.shareBase`) against a real server, real workers and real TRL training on
the cpu: runs queued together are granted the device together and trained by one worker, each a LoRA adapter of its
own, and each trains exactly what it trains alone — per-update losses and final weights — with its own pause and
resume; `runs get` names the runs it shared the device with and the device's tokens/s in all."""

from __future__ import annotations

import pytest

from tests.conftest import Cli
from tests.run_fixtures import capitals_project, followed, plan, write_plan

pytestmark = pytest.mark.integration


def run_plan(name: str, learning_rate: float, rank: int, shared: bool, **execution) -> dict:
    document = plan(name, "chat")
    document["config"]["seed"] = 11
    document["config"]["hyperparams"] = {"optimizer": {"learningRate": learning_rate}, "lora": {"rank": rank},
                                         "training": {"maxSteps": 4, "batchSize": 4}}
    document["execution"] = {"deviceProfile": "cpu", "shareBase": shared, **execution}
    return document


@pytest.fixture(scope="module")
def project(sqlite_server, tmp_path_factory) -> dict:
    return capitals_project(sqlite_server.url, tmp_path_factory.mktemp("shared"), "sb")


def started(cli: Cli, tmp_path, document: dict) -> str:
    return cli.json("training", "runs", "start", "-f", write_plan(tmp_path, document), "--force")["runId"]


def losses(cli: Cli, run_id: str) -> list[float]:
    return [step["loss"] for step in cli.json("training", "runs", "metrics", run_id)["steps"]]


def test_runs_sharing_a_base_train_what_each_trains_alone_and_pause_on_their_own(project, sqlite_server, tmp_path,
                                                                                   capsys):
    cli, name = Cli(capsys, sqlite_server.url), project["name"]
    # two runs alone first; the three that share a base queue behind them, so the device frees for all three at once
    alone_a = started(cli, tmp_path, run_plan(name, 0.01, 8, False))
    alone_b = started(cli, tmp_path, run_plan(name, 0.03, 4, False))
    shared_a = started(cli, tmp_path, run_plan(name, 0.01, 8, True))
    shared_b = started(cli, tmp_path, run_plan(name, 0.03, 4, True))
    pausing = started(cli, tmp_path, run_plan(name, 0.01, 8, True, pauseAtStep=2))
    ended = {run_id: followed(cli, "training", "runs", "wait", run_id)
             for run_id in (alone_a, alone_b, shared_a, shared_b, pausing)}
    assert [ended[run_id]["phase"] for run_id in ended] == ["COMPLETED"] * 4 + ["PAUSED"], \
        {run_id: run["failureReason"] for run_id, run in ended.items()}

    # one worker trained the three, each with its own adapter, optimizer and data order
    assert sorted(ended[shared_a]["cost"]["sharedBase"]["runs"]) == sorted([shared_b, pausing])
    assert ended[shared_b]["cost"]["sharedBase"]["runs"] == [shared_a, pausing]
    assert "sharedBase" not in ended[alone_a]["cost"]
    for alone, shared in ((alone_a, shared_a), (alone_b, shared_b)):
        assert losses(cli, shared) == pytest.approx(losses(cli, alone), rel=1e-5)
        assert ended[shared]["results"]["weightsDigest"] == ended[alone]["results"]["weightsDigest"] is not None
    assert losses(cli, pausing) == pytest.approx(losses(cli, alone_a)[:2], rel=1e-5)

    total = ended[shared_b]["cost"]["sharedBase"]["deviceTokensPerSecond"]
    own = ended[shared_b]["cost"]["tokensPerSecondPerDevice"]
    assert total > own > 0
    text = cli.ok("training", "runs", "get", shared_b).out
    assert f"Shared base  with runs {shared_a[:12]}, {pausing[:12]}: {total:.0f} tokens/s on the device in all" in text

    # the paused one resumes on its own and ends with the weights of the run trained alone
    cli.ok("training", "runs", "resume", pausing)
    resumed = followed(cli, "training", "runs", "wait", pausing)
    assert resumed["phase"] == "COMPLETED", resumed["failureReason"]
    assert resumed["results"]["weightsDigest"] == ended[alone_a]["results"]["weightsDigest"]
    assert losses(cli, pausing) == pytest.approx(losses(cli, alone_a), rel=1e-5)


def test_share_base_is_refused_where_runs_cannot_share_one(project, sqlite_server, tmp_path, capsys):
    cli, name = Cli(capsys, sqlite_server.url), project["name"]
    dry = cli.ok("training", "runs", "start", "-f", write_plan(tmp_path, run_plan(name, 0.01, 8, True)), "--dry-run")
    assert (f"Shared base  trains in one worker beside the runs of {name} queued with it over this base that state "
            "execution.shareBase, each its own adapter") in dry.out
    several = run_plan(name, 0.01, 8, True)
    several["execution"]["gpus"] = 2
    refused = cli("training", "runs", "start", "-f", write_plan(tmp_path, several), "--dry-run")
    assert refused.code != 0 and "execution.shareBase trains runs side by side on one device" in refused.err
    full = run_plan(name, 0.01, 8, True)
    full["config"]["model"] = {"adapter": "full"}
    refused = cli("training", "runs", "start", "-f", write_plan(tmp_path, full), "--dry-run")
    assert refused.code != 0 and "config.model.adapter: full does not" in refused.err


@pytest.mark.parametrize("restore", ["trainingState", "weights"])
def test_a_sweeps_points_train_together_as_each_branch_trains_alone(project, sqlite_server, tmp_path, capsys, restore):
    """A sweep of a parent that stated shareBase: its points are queued together and trained by one worker, each
    from the parent's save (its training state, or its adapter with a fresh optimizer), as the same branches
    trained one at a time."""
    import yaml

    cli, name = Cli(capsys, sqlite_server.url), project["name"]
    parent = followed(cli, "training", "runs", "start", "-f", write_plan(tmp_path, run_plan(name, 0.01, 8, True)),
                      "--force", "--wait")
    assert parent["phase"] == "COMPLETED", parent["failureReason"]
    rates = [0.02, 0.005]
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"axes": [{"path": "hyperparams.optimizer.learningRate", "values": rates}]}))
    points = cli.json("training", "runs", "sweep", parent["runId"], "--grid", str(grid), "--restore", restore)["runs"]
    swept = [followed(cli, "training", "runs", "wait", point["runId"]) for point in points]
    alone = []
    for rate in rates:  # the same branches, one at a time
        overrides = tmp_path / f"lr-{rate}.yaml"
        overrides.write_text(yaml.safe_dump({"hyperparams": {"optimizer": {"learningRate": rate}}}))
        alone.append(followed(cli, "training", "runs", "branch", parent["runId"], "--overrides", str(overrides),
                              "--restore", restore, "--wait"))
    for point, single in zip(swept, alone, strict=True):
        assert point["phase"] == single["phase"] == "COMPLETED", (point["failureReason"], single["failureReason"])
        assert point["cost"]["sharedBase"]["runs"] == [other["runId"] for other in swept if other is not point]
        assert "sharedBase" not in single["cost"]
        assert losses(cli, point["runId"]) == pytest.approx(losses(cli, single["runId"]), rel=1e-5)
        assert point["results"]["weightsDigest"] == single["results"]["weightsDigest"] is not None
