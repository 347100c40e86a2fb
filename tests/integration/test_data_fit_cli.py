"""Fitting rows into maxSeqLength through the CLI, against a real server, a real worker and real TRL training of
the stand-in model on CPU: the length check before a device is claimed under `data.truncation` error, drop, oldest
and oldest_or_drop, the refusal of `right` without explicit masks, and full runs that prove the worker's fitting is
wired to the run (drop: the dataFit a completed run shows; a malformed mask: the run fails naming its line).

What the worker does with each row under each truncation value and each malformed mask (drop, oldest,
oldest_or_drop, right, the refusals by line) is tested at the preparation step, where the run reads its rows:
tests/unit/test_data_fit_prep.py.

Every expected figure is an independent count (tests/data_fit_cases.py): the stand-in's own tokenizer and chat
template applied directly, and turns removed by the rule the release notes state.
"""

from __future__ import annotations

import json
import uuid

import httpx
import pytest
import yaml

from tests.conftest import Cli, chat_row, from_standin, start_server, write_jsonl
from tests.data_fit_cases import (
    Independent,
    below_trim_threshold_rows,
    masked,
    oldest_rows,
    short_rows,
    trim_figures,
    unfit_rows,
)

pytestmark = pytest.mark.integration
MODEL = "optimize/tiny-llama-3.2"
WAIT = "300"


@pytest.fixture(scope="module")
def fit_server(tmp_path_factory):
    proc = start_server(tmp_path_factory.mktemp("data-fit"))
    httpx.post(f"{proc.url}/v1/training/base-models/{MODEL}/select", headers=proc.headers, json=from_standin(MODEL),
               timeout=600).raise_for_status()
    yield proc
    proc.stop()


@pytest.fixture
def fcli(capsys, fit_server) -> Cli:
    return Cli(capsys, fit_server.url)


@pytest.fixture
def independent(fcli) -> Independent:
    return Independent.of(fcli.json("training", "base-models", "get", MODEL)["selection"]["path"])


def project_with(cli: Cli, tmp_path, datasets: dict[str, list[dict]]) -> str:
    project = f"fit{uuid.uuid4().hex[:8]}"
    for name, rows in datasets.items():
        cli.ok("registry", "datasets", "register", f"{project}/{name}", "-f",
               str(write_jsonl(tmp_path / f"{name}-{uuid.uuid4().hex[:6]}.jsonl", rows)))
    cli.ok("training", "projects", "create", project)
    return project


def plan_file(tmp_path, project: str, dataset: str, max_seq: int = 256, truncation: str = "error",
              mask_column: str | None = None, validation: str | None = None) -> str:
    config: dict = {"dataset": dataset, "maxSeqLength": max_seq, "data": {"truncation": truncation},
                    "hyperparams": {"optimizer": {"learningRate": 0.01},
                                    "training": {"maxSteps": 2, "batchSize": 2}}}
    if mask_column:
        config["loss"] = {"explicitLossMaskColumn": mask_column}
    if validation:
        config["validation"] = {"dataset": validation}
    path = tmp_path / f"plan-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump({"kind": "run", "project": project, "baseModel": MODEL, "config": config,
                                    "execution": {"deviceProfile": "cpu"}}))
    return str(path)


def run_to_end(cli: Cli, plan: str) -> dict:
    """`runs start --wait`, then the run as `runs get` shows it."""
    result = cli("training", "runs", "start", "-f", plan, "--force", "--wait", "-o", "json-compact")
    lines = [json.loads(line) for line in result.out.splitlines() if line.strip()]
    assert lines, f"runs start printed nothing: {result.err}"
    return cli.json("training", "runs", "get", lines[-1]["runId"])


def analyze(cli: Cli, reference: str) -> dict:
    analysis = cli.json("training", "datasets", "analyze", reference, "--model", MODEL, "--wait")
    assert analysis["phase"] == "done", analysis
    return analysis


def runs_of(cli: Cli, project: str) -> list[dict]:
    return cli.json("training", "runs", "list", "--project", project)["runs"]


def one_line(text: str) -> str:
    return " ".join(text.split())


# 1. drop ----------------------------------------------------------------------------------------------------------

def test_drop_leaves_long_rows_out_and_counts_them(fcli, independent, tmp_path, capsys):
    rows = short_rows(4) + [chat_row("word " * words, "ok") for words in (60, 95, 98, 99, 100, 160)]
    lengths = [independent.length(row["messages"]) for row in rows]
    too_long = sum(1 for n in lengths if n > 256)
    assert too_long == 3 and 255 in lengths and 257 in lengths  # rows on both sides of the limit, close to it
    validation = short_rows(2) + [chat_row("word " * 160, "ok")]  # left out too, but not counted
    project = project_with(fcli, tmp_path, {"chat": rows, "valid": validation})
    run = run_to_end(fcli, plan_file(tmp_path, project, "chat", truncation="drop", validation="valid"))
    assert run["phase"] == "COMPLETED", run.get("failureReason")
    fit = run["results"]["dataFit"]
    assert fit["tooLong"] == too_long
    assert fit["rows"] == len(rows) - too_long
    assert fit["trimmed"] == 0 and fit["turnsRemoved"] == 0 and fit["cut"] == 0
    assert run["results"]["validationLoss"] is not None  # the validation set trained without its long row
    text = fcli.ok("training", "runs", "get", run["runId"]).out
    assert f"Data fit     {too_long} row(s) longer than maxSeqLength left out (tooLong)" in text

    # how `runs get` shows the other counts a run reports (the counts themselves: tests/unit/test_data_fit_prep.py)
    trimmed, turns_removed, _ = trim_figures(independent, oldest_rows(), 512)
    assert (f"Data fit     {trimmed} row(s) trimmed, {turns_removed} oldest turn(s) removed"
            in shown(capsys, run, rows=8, trimmed=trimmed, turnsRemoved=turns_removed))
    trimmed, turns_removed, _ = trim_figures(independent, unfit_rows(), 512)
    assert (f"Data fit     1 row(s) longer than maxSeqLength left out (tooLong); {trimmed} row(s) trimmed, "
            f"{turns_removed} oldest turn(s) removed"
            in shown(capsys, run, rows=3, tooLong=1, trimmed=trimmed, turnsRemoved=turns_removed))
    assert "Data fit     2 row(s) cut at maxSeqLength past their mask" in shown(capsys, run, rows=6, cut=2)
    assert "Data fit" not in shown(capsys, run, rows=6)


def shown(capsys, run: dict, **counts) -> str:
    """`runs get` as text for this run's record with other dataFit counts."""
    from optimize.cli.commands.runs import _render_run
    from optimize.cli.output import console

    fit = {"rows": 0, "tooLong": 0, "trimmed": 0, "turnsRemoved": 0, "cut": 0, **counts}
    capsys.readouterr()
    _render_run(console(), {**run, "results": {**run["results"], "dataFit": fit}})
    return capsys.readouterr().out


# 2. drop that would leave a dataset empty --------------------------------------------------------------------------

def test_drop_that_would_leave_a_dataset_empty_is_refused_at_submission(fcli, independent, tmp_path):
    rows = [chat_row("word " * words, "ok") for words in (120, 160, 200)]
    assert all(independent.length(row["messages"]) > 256 for row in rows)
    project = project_with(fcli, tmp_path, {"long": rows})
    analysis = analyze(fcli, f"{project}/long")
    commit = fcli.json("training", "base-models", "get", MODEL)["commit"]
    refused = fcli("training", "runs", "start", "-f", plan_file(tmp_path, project, "long", truncation="drop"),
                   "--force")
    assert refused.code == 1
    err = one_line(refused.err)
    assert (f"data.truncation: drop would leave {project}/long:v1 empty: all 3 row(s) are longer than maxSeqLength "
            f"256 (measured by analysis {analysis['analysisId'][:12]} under {MODEL} at {commit[:12]})") in err
    assert "raise maxSeqLength" in err
    assert runs_of(fcli, project) == []  # nothing stored


# 3. oldest: the length check admits the rows the run will trim ---------------------------------------------------

def test_the_length_check_admits_under_oldest_the_rows_that_fit_trimmed(fcli, independent, tmp_path):
    """maxSeqLength 512: rows the analysis measured trimmed and found to fit. maxSeqLength 256: rows of 257 to 512
    tokens, which the analysis does not measure trimmed, are left to the run. (How the run trims both, with the
    dataFit it reports: tests/unit/test_data_fit_prep.py.)"""
    measured, unmeasured = oldest_rows(), below_trim_threshold_rows()
    trimmed, turns_removed, removed = trim_figures(independent, measured, 512)
    assert None not in removed and 0 in removed and trimmed >= 4 and turns_removed > trimmed, removed
    short_trimmed, _, short_removed = trim_figures(independent, unmeasured, 256)
    assert None not in short_removed and short_trimmed >= 2, short_removed
    assert all(256 < independent.length(row["messages"]) <= 512
               for row, r in zip(unmeasured, short_removed, strict=True) if r)
    project = project_with(fcli, tmp_path, {"turns": measured, "short": unmeasured})
    for dataset, limit, over, trimmed_measured, trim_unmeasured in (("turns", 512, trimmed, trimmed, 0),
                                                                    ("short", 256, short_trimmed, 0, short_trimmed)):
        analyze(fcli, f"{project}/{dataset}")
        admitted = fcli.json("training", "runs", "start", "-f",
                             plan_file(tmp_path, project, dataset, limit, "oldest"), "--dry-run")
        [lengths] = admitted["resolved"]["lengths"]
        assert lengths["status"] == "done" and lengths["overMaxSeqLength"] == over, lengths
        assert (lengths["trimmed"], lengths["trimUnmeasured"]) == (trimmed_measured, trim_unmeasured), lengths
        assert lengths["cannotFitTrimmed"] == 0
        # the analysis done, the dry run shows the run's estimate; no expected MFU on the cpu
        assert admitted["estimate"]["steps"] >= 1 and admitted["estimate"]["analysisId"], admitted["estimate"]
        assert admitted["expectedMfu"] is None
    text = fcli.ok("training", "runs", "start", "-f", plan_file(tmp_path, project, "turns", 512, "oldest"),
                   "--dry-run").out
    assert "Estimate     " in text and " updates, " in text, text
    assert runs_of(fcli, project) == []  # a dry run starts nothing


# 4. oldest with a row that cannot fit even trimmed, and oldest_or_drop -------------------------------------------

def test_a_row_that_cannot_fit_trimmed_is_refused_under_oldest_and_admitted_under_oldest_or_drop(
        fcli, independent, tmp_path):
    rows = unfit_rows()
    trimmed, _turns_removed, removed = trim_figures(independent, rows, 512)
    assert removed[2] is None and removed.count(None) == 1 and trimmed >= 2, removed
    unfit_length = independent.trim(rows[2]["messages"], 512)[1]
    assert unfit_length > 512
    project = project_with(fcli, tmp_path, {"turns": rows})
    analysis = analyze(fcli, f"{project}/turns")
    commit = fcli.json("training", "base-models", "get", MODEL)["commit"]
    refused = fcli("training", "runs", "start", "-f", plan_file(tmp_path, project, "turns", 512, "oldest"), "--force")
    assert refused.code == 1
    err = one_line(refused.err)
    assert (f"the run is refused before it claims a device: 1 row(s) of {project}/turns:v1 are longer than "
            f"maxSeqLength 512 even with their oldest turns removed: line 3 ({unfit_length} tokens trimmed) "
            f"(measured by analysis {analysis['analysisId'][:12]} under {MODEL} at {commit[:12]})") in err
    assert "data.truncation: oldest_or_drop" in err
    assert runs_of(fcli, project) == []

    # oldest_or_drop leaves the row out instead (what the run then reports: tests/unit/test_data_fit_prep.py)
    admitted = fcli.json("training", "runs", "start", "-f",
                         plan_file(tmp_path, project, "turns", 512, "oldest_or_drop"), "--dry-run")
    [lengths] = admitted["resolved"]["lengths"]
    assert lengths["cannotFitTrimmed"] == 1 and lengths["unfitRows"] == [{"line": 3, "trimmedLength": unfit_length}]
    assert runs_of(fcli, project) == []


# 5. right ---------------------------------------------------------------------------------------------------------

def test_right_without_explicit_masks_is_refused_at_submission(fcli, independent, tmp_path):
    long = [chat_row("word " * words, "ok") for words in (120, 200)]
    rows = [masked(independent, row) for row in short_rows(3)] + [masked(independent, row, range(10, 30))
                                                                  for row in long]
    project = project_with(fcli, tmp_path, {"masked": rows})
    refused = fcli("training", "runs", "start", "-f", plan_file(tmp_path, project, "masked", truncation="right"),
                   "--force")
    assert refused.code == 1 and "data.truncation: right would cut" in one_line(refused.err)
    assert runs_of(fcli, project) == []


# 6. explicit masks: a row the worker refuses fails the run, naming its line ---------------------------------------

def test_a_malformed_mask_fails_the_run_naming_its_line(fcli, independent, tmp_path):
    """One case end to end; every malformed mask is refused at the preparation step (test_data_fit_prep)."""
    row = chat_row("What is the capital of France?", "Paris.")
    length = independent.length(row["messages"])
    rows = [masked(independent, r) for r in short_rows(2)] + [{**row, "mask": [0] * length + [1]}]
    project = project_with(fcli, tmp_path, {"masked": rows})
    run = run_to_end(fcli, plan_file(tmp_path, project, "masked", mask_column="mask"))
    assert run["phase"] == "FAILED"
    assert run["failureReason"].startswith(
        f"{project}/masked:v1 line 3: 'mask' has {length + 1} values but the row renders to {length} tokens"
    ), run["failureReason"]
    assert "remove loss.explicitLossMaskColumn" in run["failureReason"]
    assert f"Failure      {project}/masked:v1 line 3: 'mask' has" in fcli.ok("training", "runs", "get",
                                                                             run["runId"]).out


# 7. error: long single-turn rows refused before a device ---------------------------------------------------------

def test_a_long_single_turn_row_is_refused_at_submission_once_analyzed(fcli, independent, tmp_path):
    rows = short_rows(2) + [chat_row("word " * 120, "ok"), chat_row("word " * 200, "ok"), chat_row("word " * 90, "ok")]
    lengths = [independent.length(row["messages"]) for row in rows]
    assert lengths[3] > lengths[2] > 256 >= lengths[4]
    project = project_with(fcli, tmp_path, {"single": rows})
    analysis = analyze(fcli, f"{project}/single")
    commit = fcli.json("training", "base-models", "get", MODEL)["commit"]
    expected = (f"the run is refused before it claims a device: 2 row(s) of {project}/single:v1 are longer than "
                f"maxSeqLength 256: line 4 ({lengths[3]} tokens), line 3 ({lengths[2]} tokens) (measured by analysis "
                f"{analysis['analysisId'][:12]} under {MODEL} at {commit[:12]}); raise maxSeqLength (the analysis "
                f"suggests {analysis['report']['suggestedMaxSeqLength']}), shorten the rows, or set "
                "data.truncation: drop to leave them out")
    plan = plan_file(tmp_path, project, "single")
    refused = fcli("training", "runs", "start", "-f", plan, "--force")
    assert refused.code == 1 and expected in one_line(refused.err), refused.err
    assert runs_of(fcli, project) == []
    dry = fcli("training", "runs", "start", "-f", plan, "--dry-run")
    assert dry.code == 1 and expected in one_line(dry.err)
