"""The run's preparation step under each `data.truncation` value and with explicit loss masks: the worker's own
`_train` (rows read from the job's objects, checked by the registry's row rule, fitted, written as the token-id
columns the trainer reads, the datasets' checks, the dataFit it reports), stopped where training would begin.

These are the rules the run enforces when it reads its rows; a full run that proves the path is wired (the dataFit
a completed run shows, a refusal on the run naming its line) is in tests/integration/test_data_fit_cli.py.

Every expected figure is an independent count (tests/data_fit_cases.py): the stand-in's own tokenizer and chat
template applied directly, and turns removed by the rule the release notes state.
"""

from __future__ import annotations

import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from tests.conftest import chat_row
from tests.data_fit_cases import (
    FAMILY,
    Independent,
    below_trim_threshold_rows,
    conversation,
    masked,
    oldest_rows,
    short_rows,
    trim_figures,
    unfit_rows,
)

MODEL = "optimize/tiny-llama-3.2"
PROJECT = "fit"


@dataclass
class Prepared:
    data_fit: dict[str, int]  # what the worker reports as the run's results.dataFit
    kept: int  # the rows the trainer is told it has
    train: list[dict]  # the prepared rows the trainer reads: input_ids and labels
    validation: list[dict] | None


class _ServerStandInRows:
    """Stands in for the server (these tests start none): each object's example lines, as the worker's channel
    reads them."""

    def __init__(self, lines: dict[str, list[bytes]]) -> None:
        self.lines = lines

    def example_lines(self, objects):
        number = 0
        for item in objects:
            for raw in self.lines[item["path"]]:
                number += 1
                yield number, raw


class _Reporter:
    pause = None

    def __init__(self) -> None:
        self.reports: list[dict] = []
        self.lost = threading.Event()

    def progress(self, urgent: bool = False, **fields) -> None:
        self.reports.append(fields)


class _ReachedTraining(Exception):
    pass


def examples(reference: str, lines: list[bytes] | None) -> dict | None:
    """A dataset version's examples as a job spec names them: one object, read by `_Channel` by its path."""
    if lines is None:
        return None
    return {"digest": "0" * 64, "rows": len(lines),
            "objects": [{"path": reference, "sha256": "0" * 64, "bytes": sum(map(len, lines)), "rows": len(lines)}]}


@pytest.fixture(scope="module")
def model(standin_dirs) -> dict:
    """The spec's model block, as the server writes it for optimize/tiny-llama-3.2 (its stand-in built here)."""
    from optimize.catalog.catalog import load_catalog

    entry = load_catalog().find(MODEL)
    assert entry.family == FAMILY and entry.stand_in.family == FAMILY and entry.stand_in.size == "tiny"
    path, commit = standin_dirs[FAMILY]
    return {"id": entry.id, "repository": entry.repository, "family": entry.family, "commit": commit,
            "path": str(path), "chat_template": entry.chat_template}


@pytest.fixture(scope="module")
def independent(model) -> Independent:
    return Independent.of(model["path"])


@pytest.fixture
def prepare(model, tmp_path, monkeypatch):
    """prepare(rows, ...) -> Prepared, or raises the RowRefused that fails the run (its message is the run's
    failureReason)."""
    import pyarrow.parquet as pq

    from optimize.schemas.jobs import RunSpec
    from optimize.schemas.plans import Execution, RunConfig
    from optimize.schemas.resolved import ResolvedPlan
    from optimize.training.engines import harness
    from optimize.worker import run as worker_run

    reached: dict = {}

    def stop_before_training(model_dir, config, save_every, train_rows, rows, eval_rows, workdir, hooks,
                             resume_from=None, start=None, preload=None, preparing=None, sharding=None,
                             shared=None):
        reached.update(train=pq.read_table(train_rows).to_pylist(), kept=rows,
                       validation=pq.read_table(eval_rows).to_pylist() if eval_rows else None)
        raise _ReachedTraining

    monkeypatch.setattr(harness, "train", stop_before_training)

    def run(rows: list[dict], max_seq: int = 256, truncation: str = "error", mask_column: str | None = None,
            validation: list[dict] | None = None, dataset: str = "chat") -> Prepared:
        reference = f"{PROJECT}/{dataset}:v1"
        plan_config = {"dataset": reference, "maxSeqLength": max_seq, "data": {"truncation": truncation}}
        if mask_column:
            plan_config["loss"] = {"explicitLossMaskColumn": mask_column}
        config = RunConfig.model_validate(plan_config).model_dump(by_alias=True, mode="json")
        config["model"] = {"precision": "fp32", "gradientCheckpointing": False, "attentionImplementation": "sdpa"}
        lines = {reference: [orjson.dumps(row) for row in rows]}
        if validation is not None:
            config["validation"]["dataset"] = f"{PROJECT}/valid:v1"
            lines[f"{PROJECT}/valid:v1"] = [orjson.dumps(row) for row in validation]
        execution = Execution.model_validate({"deviceProfile": "cpu"}).model_dump(by_alias=True, mode="json")
        spec = RunSpec.model_validate({
            "run_id": "r" * 32, "attempt": 1, "project": PROJECT, "method": config["method"], "config": config,
            "execution": execution, "devices": ["cpu:0"], "lease_seconds": 60, "model": model,
            "dataset": examples(reference, lines[reference]),
            "validation": examples(f"{PROJECT}/valid:v1", validation and lines[f"{PROJECT}/valid:v1"]),
            "resume": None, "branch": None}).wire()
        reporter = _Reporter()
        reached.clear()
        workdir = Path(tempfile.mkdtemp(dir=tmp_path))
        with pytest.raises(_ReachedTraining):
            plan = ResolvedPlan.model_validate({"config": spec["config"], "execution": spec["execution"]})
            worker_run._train(_ServerStandInRows(lines), spec, plan, reporter, None, workdir, {})
        [data_fit] = [r["dataFit"] for r in reporter.reports if "dataFit" in r]
        return Prepared(data_fit, reached["kept"], reached["train"], reached["validation"])

    return run


def refusal(prepare, *args, **kwargs) -> str:
    """The reason a run that reads these rows fails with."""
    from optimize.training.prep.data_fit import RowRefused

    with pytest.raises(RowRefused) as refused:
        prepare(*args, **kwargs)
    return str(refused.value)


def trained_tokens(row: dict) -> list[int]:
    return [i for i, label in enumerate(row["labels"]) if label != -100]


# drop -------------------------------------------------------------------------------------------------------------

def test_drop_leaves_long_rows_out_and_counts_only_the_training_set(prepare, independent):
    rows = short_rows(4) + [chat_row("word " * words, "ok") for words in (60, 95, 98, 99, 100, 160)]
    lengths = [independent.length(row["messages"]) for row in rows]
    too_long = sum(1 for n in lengths if n > 256)
    assert too_long == 3 and 255 in lengths and 257 in lengths  # rows on both sides of the limit, close to it
    validation = short_rows(2) + [chat_row("word " * 160, "ok")]  # left out too, but not counted
    prepared = prepare(rows, truncation="drop", validation=validation)
    assert prepared.data_fit == {"rows": len(rows) - too_long, "tooLong": too_long, "trimmed": 0, "turnsRemoved": 0,
                                 "cut": 0}
    assert prepared.kept == len(prepared.train) == len(rows) - too_long
    assert sorted(len(r["input_ids"]) for r in prepared.train) == sorted(n for n in lengths if n <= 256)
    assert len(prepared.validation) == 2  # the validation set trains without its long row


# oldest -----------------------------------------------------------------------------------------------------------

def test_oldest_trims_rows_that_fit_once_their_oldest_turns_are_removed(prepare, independent):
    rows = oldest_rows()
    trimmed, turns_removed, removed = trim_figures(independent, rows, 512)
    assert None not in removed and 0 in removed and trimmed >= 4 and turns_removed > trimmed, removed
    # measured trimmed
    assert all(independent.length(row["messages"]) > 512 for row, r in zip(rows, removed, strict=True) if r)
    prepared = prepare(rows, max_seq=512, truncation="oldest")
    fit = prepared.data_fit
    assert (fit["trimmed"], fit["turnsRemoved"]) == (trimmed, turns_removed), removed
    assert fit["rows"] == len(rows) and fit["tooLong"] == 0 and fit["cut"] == 0
    assert len(prepared.train) == len(rows) and all(len(r["input_ids"]) <= 512 for r in prepared.train)
    for row, kept, r in zip(rows, prepared.train, removed, strict=True):
        # each row trains as the tokenizer renders it with its r oldest turns removed
        assert len(kept["input_ids"]) == independent.trim(row["messages"], 512)[1], r


def test_oldest_trims_rows_shorter_than_the_analysis_trim_threshold(prepare, independent):
    """maxSeqLength 256: rows of 257 to 512 tokens that fit once their oldest turns are removed (the analysis
    leaves these to the run: test_data_fit_cli checks that the length check admits them)."""
    rows = below_trim_threshold_rows()
    trimmed, turns_removed, removed = trim_figures(independent, rows, 256)
    assert None not in removed and trimmed >= 2, removed
    assert all(256 < independent.length(row["messages"]) <= 512 for row, r in zip(rows, removed, strict=True) if r)
    fit = prepare(rows, max_seq=256, truncation="oldest").data_fit
    assert (fit["trimmed"], fit["turnsRemoved"]) == (trimmed, turns_removed)
    assert fit["rows"] == len(rows) and fit["tooLong"] == 0


def test_a_row_that_cannot_fit_trimmed_is_refused_under_oldest_and_left_out_under_oldest_or_drop(
        prepare, independent):
    rows = unfit_rows()
    trimmed, turns_removed, removed = trim_figures(independent, rows, 512)
    assert removed[2] is None and removed.count(None) == 1 and trimmed >= 2, removed
    length = independent.length(rows[2]["messages"])
    unfit_length = independent.trim(rows[2]["messages"], 512)[1]
    assert unfit_length > 512
    # a run whose length check did not refuse it first refuses the row when it reads it
    reason = refusal(prepare, rows, max_seq=512, truncation="oldest")
    assert reason.startswith(f"{PROJECT}/chat:v1 line 3 is {length} tokens long and still {unfit_length} with its "
                             "oldest turns removed, longer than maxSeqLength 512")
    assert "data.truncation: oldest_or_drop" in reason

    prepared = prepare(rows, max_seq=512, truncation="oldest_or_drop")
    fit = prepared.data_fit
    assert fit["tooLong"] == 1 and fit["rows"] == len(rows) - 1
    assert (fit["trimmed"], fit["turnsRemoved"]) == (trimmed, turns_removed)
    assert len(prepared.train) == len(rows) - 1


def test_oldest_refuses_a_long_row_carrying_an_explicit_mask(prepare, independent):
    long_row = conversation(4, 60)
    length = independent.length(long_row["messages"])
    assert length > 512
    rows = [masked(independent, chat_row("hi", "hello")), {**long_row, "mask": [0] * (length - 3) + [1] * 3}]
    reason = refusal(prepare, rows, 512, "oldest", mask_column="mask", dataset="masked")
    assert (f"{PROJECT}/masked:v1 line 2 is {length} tokens long and carries 'mask', whose mask covers the whole "
            "conversation, so its oldest turns cannot be removed") in reason


# right ------------------------------------------------------------------------------------------------------------

def test_right_cuts_only_past_explicit_masks(prepare, independent):
    long = [chat_row("word " * words, "ok") for words in (120, 200)]
    assert all(independent.length(row["messages"]) > 256 for row in long)
    rows = ([masked(independent, row) for row in short_rows(3)] + [chat_row("no mask here", "fine")]
            + [masked(independent, row, range(10, 30)) for row in long])
    prepared = prepare(rows, truncation="right", mask_column="mask", dataset="masked")
    fit = prepared.data_fit
    assert fit["cut"] == 2 and fit["rows"] == len(rows) and fit["tooLong"] == 0
    cut = prepared.train[-2:]
    assert all(len(r["input_ids"]) == 256 for r in cut)  # cut at maxSeqLength
    assert all(trained_tokens(r) == list(range(10, 30)) for r in cut)  # what its mask selects, nothing else
    for row, kept in zip(rows[:3], prepared.train[:3], strict=True):
        n = len(row["mask"])
        assert len(kept["input_ids"]) == n and trained_tokens(kept) == [n - 3, n - 2, n - 1]

    past = chat_row("word " * 120, "ok")
    length = independent.length(past["messages"])
    reason = refusal(prepare, [masked(independent, short_rows(1)[0]), masked(independent, past)],
                     truncation="right", mask_column="mask", dataset="masked")
    assert (f"{PROJECT}/masked:v1 line 2 is {length} tokens long and its mask selects tokens past maxSeqLength 256, "
            "which data.truncation: right would cut") in reason


# explicit masks ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["wrong length", "not 0 or 1", "first token", "no token"])
def test_a_malformed_mask_fails_the_run_naming_its_line(prepare, independent, case):
    row = chat_row("What is the capital of France?", "Paris.")
    length = independent.length(row["messages"])
    mask, words = {
        "wrong length": ([0] * length + [1], f"'mask' has {length + 1} values but the row renders to {length} tokens"),
        "not 0 or 1": ([0] * (length - 1) + [2], "'mask' must be a non-empty list of integer 0 and 1 values"),
        "first token": ([1] * length, "'mask' selects the first token, which cannot be trained"),
        "no token": ([0] * length, "'mask' selects no token"),
    }[case]
    rows = [masked(independent, r) for r in short_rows(2)] + [{**row, "mask": mask}]
    reason = refusal(prepare, rows, mask_column="mask", dataset="masked")
    assert reason.startswith(f"{PROJECT}/masked:v1 line 3: {words}"), reason
    assert "remove loss.explicitLossMaskColumn" in reason


def test_a_dataset_without_any_mask_fails_the_run(prepare):
    reason = refusal(prepare, short_rows(4), mask_column="mask", dataset="plain")
    assert reason.startswith(f"{PROJECT}/plain:v1 holds no row with a mask under 'mask', which "
                             "loss.explicitLossMaskColumn names"), reason


def test_the_rows_train_as_the_tokenizer_renders_them(prepare, independent):
    """The prepared columns are the template's tokens, the default loss selecting the final answer only."""
    rows = short_rows(3)
    prepared = prepare(rows)
    for row, kept in zip(rows, prepared.train, strict=True):
        ids = independent.tokenizer.apply_chat_template(row["messages"], tokenize=True, return_dict=True,
                                                        **independent.kwargs)["input_ids"]
        assert kept["input_ids"] == ids
        assert 0 < len(trained_tokens(kept)) < len(ids) and trained_tokens(kept)[-1] == len(ids) - 1
