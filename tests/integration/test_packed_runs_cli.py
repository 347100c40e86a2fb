"""Packed supervised runs against a real server, real workers and real TRL training on the cpu: rows of different
lengths packed into maxSeqLength bins train the same per-update losses as the same rows unpacked (each update
taking every row), make their updates over the bins, and say how full the bins are in `runs get`."""

from __future__ import annotations

import pytest

from tests.conftest import Cli, chat_row, pair_row, write_jsonl
from tests.run_fixtures import CAPITALS, MODEL, capitals_project, followed, plan, write_plan

pytestmark = pytest.mark.integration

ROWS = 12


def rows() -> list[dict]:
    """Short answers and long ones, so the bins hold several rows each and differ in how full they are."""
    long = " It is the largest city of the country and its seat of government, with many museums."
    return [chat_row(f"What is the capital of {country}?", f"The capital is {city}." + long * (i % 3))
            for i, (country, city) in enumerate(CAPITALS + CAPITALS[:ROWS - len(CAPITALS)])]


def packed_plan(name: str, packing: bool | None, batch: int, execution: dict | None = None, **training) -> dict:
    document = plan(name, "lengths")
    document["config"]["seed"] = 5
    document["config"]["maxSeqLength"] = 192
    # no LoRA dropout: its masks would be drawn over the packed batch's shape, not each row's
    document["config"]["hyperparams"]["lora"] = {"dropout": 0.0}
    document["config"]["hyperparams"]["training"] = {"batchSize": batch, **training}
    if packing is None:  # left out: the cpu's default, on
        del document["config"]["packing"]
    else:
        document["config"]["packing"] = packing
    document["execution"] = {"deviceProfile": "cpu", **(execution or {})}
    return document


@pytest.fixture(scope="module")
def project(sqlite_server, tmp_path_factory) -> dict:
    """This module's project: the capitals, and rows of different lengths registered as NAME/lengths."""
    tmp = tmp_path_factory.mktemp("packing")
    found = capitals_project(sqlite_server.url, tmp, "pk")
    from optimize.cli.main import main

    assert main(["registry", "datasets", "register", f"{found['name']}/lengths", "-f",
                 str(write_jsonl(tmp / "l.jsonl", rows())), "--server", sqlite_server.url]) == 0
    return found


def test_a_packed_run_trains_the_losses_of_the_unpacked_one_over_fewer_updates(project, sqlite_server, tmp_path,
                                                                               capsys):
    cli, name = Cli(capsys, sqlite_server.url), project["name"]

    # every row in each update, three epochs: both runs take the same tokens in every update
    unpacked = followed(cli, "training", "runs", "start", "-f",
                        write_plan(tmp_path, packed_plan(name, False, ROWS, epochs=3)), "--force", "--wait")
    packed = followed(cli, "training", "runs", "start", "-f",
                      write_plan(tmp_path, packed_plan(name, None, ROWS, epochs=3)), "--force", "--wait")
    assert unpacked["phase"] == packed["phase"] == "COMPLETED", (unpacked["failureReason"], packed["failureReason"])
    settings = cli.json("training", "runs", "get", packed["runId"], "--settings")["settings"]
    assert settings["config.packing"] == {"value": True, "source": "default"}  # on the cpu, under sdpa
    assert cli.json("training", "runs", "get", unpacked["runId"], "--settings")["settings"]["config.packing"] == {
        "value": False, "source": "stated"}
    assert packed["checks"]["status"] == "passed"  # the reference check read the packed batch row by row

    losses = {run["runId"]: [step["loss"] for step in cli.json("training", "runs", "metrics", run["runId"])["steps"]]
              for run in (unpacked, packed)}
    assert len(losses[packed["runId"]]) == len(losses[unpacked["runId"]]) == 3
    assert losses[packed["runId"]] == pytest.approx(losses[unpacked["runId"]], rel=1e-4), losses
    assert packed["results"]["tokens"] == unpacked["results"]["tokens"]  # the rows' own tokens, no padding

    fit = packed["results"]["dataFit"]["packing"]
    assert fit["rows"] == ROWS and 1 < fit["bins"] < ROWS and fit["binTokens"] == 192
    assert fit["efficiency"] == round(fit["tokens"] / (fit["bins"] * 192), 4)
    assert "packing" not in unpacked["results"]["dataFit"]
    text = cli.ok("training", "runs", "get", packed["runId"]).out
    assert (f"Packing      {ROWS} rows in {fit['bins']} bins of 192 tokens, {fit['efficiency']:.1%} of their tokens "
            "the rows' own") in text

    # two bins an update: the updates are counted over the bins, not the rows — by the dry run from the rows'
    # analysis before the run, as the run makes them
    cli.ok("training", "datasets", "analyze", f"{name}/lengths", "--model", MODEL, "--wait")
    paired_plan = write_plan(tmp_path, packed_plan(name, True, 2))
    dry = cli.json("training", "runs", "start", "-f", paired_plan, "--dry-run")
    assert dry["estimate"]["packing"] == fit and dry["estimate"]["steps"] == -(-fit["bins"] // 2)
    assert f"Packing      {ROWS} rows in {fit['bins']} bins of 192 tokens" in \
        cli.ok("training", "runs", "start", "-f", paired_plan, "--dry-run").out
    paired = followed(cli, "training", "runs", "start", "-f", paired_plan, "--force", "--wait")
    assert paired["phase"] == "COMPLETED", paired["failureReason"]
    assert paired["results"]["steps"] == dry["estimate"]["steps"] < ROWS // 2


def test_a_packed_run_paused_and_resumed_ends_with_the_uninterrupted_weights(project, sqlite_server, tmp_path, capsys):
    cli, name = Cli(capsys, sqlite_server.url), project["name"]
    whole = followed(cli, "training", "runs", "start", "-f",
                     write_plan(tmp_path, packed_plan(name, None, 2, maxSteps=4)), "--force", "--wait")
    paused = followed(cli, "training", "runs", "start", "-f",
                      write_plan(tmp_path, packed_plan(name, None, 2, {"pauseAtStep": 2}, maxSteps=4)), "--force",
                      "--wait")
    assert whole["phase"] == "COMPLETED" and paused["phase"] == "PAUSED", (whole["failureReason"],
                                                                         paused["failureReason"])
    cli.ok("training", "runs", "resume", paused["runId"])
    resumed = followed(cli, "training", "runs", "wait", paused["runId"])
    assert resumed["phase"] == "COMPLETED", resumed["failureReason"]
    assert "packing" in resumed["results"]["dataFit"]  # the resumed attempt packed the same bins again
    assert resumed["results"]["weightsDigest"] == whole["results"]["weightsDigest"] is not None


def test_packing_is_refused_where_the_rows_are_not_packed(project, sqlite_server, tmp_path, capsys):
    cli, name = Cli(capsys, sqlite_server.url), project["name"]
    cli.ok("registry", "datasets", "register", f"{name}/pairs", "-f",
           str(write_jsonl(tmp_path / "p.jsonl", [pair_row(f"q{i}") for i in range(4)])))
    document = packed_plan(name, True, 2)
    document["config"].update(method="dpo", dataset="pairs")
    refused = cli("training", "runs", "start", "-f", write_plan(tmp_path, document), "--dry-run")
    assert refused.code != 0
    assert "config.packing packs a supervised run's rows into maxSeqLength bins; a dpo run's rows are not packed" \
        in refused.err and "remove config.packing" in refused.err
