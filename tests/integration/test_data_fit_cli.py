"""Fitting rows into maxSeqLength through the CLI, against a real server, a real worker and real TRL training of
the stand-in model on CPU: `data.truncation` drop, oldest, oldest_or_drop, right and error, explicit loss masks,
and the length check before a device is claimed.

Every expected figure is an independent count: the stand-in's own tokenizer and chat template applied directly
(`apply_chat_template(tokenize=True)` with the family's template arguments), and turns removed by the rule the
release notes state, not by Optimize's rendering or trimming code.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import httpx
import pytest
import yaml

from tests.conftest import Cli, chat_row, start_server, write_jsonl

pytestmark = pytest.mark.integration
MODEL = "optimize/tiny-llama-3.2"
WAIT = "300"


@pytest.fixture(scope="module")
def fit_server(tmp_path_factory):
    proc = start_server(tmp_path_factory.mktemp("data-fit"))
    httpx.post(f"{proc.url}/v1/training/base-models/{MODEL}/select", json={}, timeout=600).raise_for_status()
    yield proc
    proc.stop()


@pytest.fixture
def fcli(capsys, fit_server) -> Cli:
    return Cli(capsys, fit_server.url)


_TOKENIZERS: dict[str, object] = {}


class Independent:
    """Lengths and trimming by the stand-in's tokenizer and chat template, applied directly."""

    def __init__(self, path: Path) -> None:
        from transformers import AutoTokenizer

        from optimize.chat.families import template_kwargs

        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.kwargs = template_kwargs("llama3.2")

    def length(self, messages: list[dict]) -> int:
        encoded = self.tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, **self.kwargs)
        return len(encoded["input_ids"])

    def trim(self, messages: list[dict], limit: int) -> tuple[int | None, int]:
        """(turns removed until the row fits, or None when it never does; its shortest length). A turn is a user
        message and the messages after it up to the next user message; anything before the first user message is
        a turn of its own; the system prompt and the final turn stay."""
        system = messages[:1] if messages[0]["role"] == "system" else []
        body = messages[len(system):]
        turns: list[list[dict]] = []
        for message in body:
            if not turns or message["role"] == "user":
                turns.append([])
            turns[-1].append(message)
        length = self.length(messages)
        if length <= limit:
            return 0, length
        for removed in range(1, len(turns)):
            length = self.length(system + [m for turn in turns[removed:] for m in turn])
            if length <= limit:
                return removed, length
        return None, length


@pytest.fixture
def independent(fcli) -> Independent:
    path = fcli.json("training", "base-models", "get", MODEL)["selection"]["path"]
    if path not in _TOKENIZERS:
        _TOKENIZERS[path] = Independent(Path(path))
    return _TOKENIZERS[path]


def conversation(turns: int, words: int = 60, last_words: int | None = None, system: bool = True) -> dict:
    messages = [{"role": "system", "content": "You answer support tickets."}] if system else []
    for i in range(turns):
        size = last_words if last_words is not None and i == turns - 1 else words
        messages += [{"role": "user", "content": f"Question {i}: " + "order refund " * size},
                     {"role": "assistant", "content": f"Answer {i}: shipped."}]
    return {"messages": messages}


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


def short_rows(count: int) -> list[dict]:
    return [chat_row(f"What is {i} plus {i}?", f"It is {2 * i}.") for i in range(count)]


# 1. drop ----------------------------------------------------------------------------------------------------------

def test_drop_leaves_long_rows_out_and_counts_them(fcli, independent, tmp_path):
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


# 3. oldest --------------------------------------------------------------------------------------------------------

def trim_figures(independent: Independent, rows: list[dict], limit: int) -> tuple[int, int, list[int | None]]:
    removed = [independent.trim(row["messages"], limit)[0] for row in rows]
    fits = [r for r in removed if r is not None]
    return sum(1 for r in fits if r), sum(fits), removed


def test_oldest_trims_rows_that_fit_once_their_oldest_turns_are_removed(fcli, independent, tmp_path):
    rows = [conversation(1, 10), conversation(3, 60), conversation(4, 60), conversation(6, 40), conversation(8, 30),
            conversation(5, 60), conversation(5, 60, system=False),
            {"messages": [{"role": "assistant", "content": "Hello, how can I help? " * 20}]
             + conversation(4, 50, system=False)["messages"]}]  # a greeting before the first user message
    trimmed, turns_removed, removed = trim_figures(independent, rows, 512)
    assert None not in removed and 0 in removed and trimmed >= 4 and turns_removed > trimmed, removed
    # measured trimmed
    assert all(independent.length(row["messages"]) > 512 for row, r in zip(rows, removed, strict=True) if r)
    project = project_with(fcli, tmp_path, {"turns": rows})
    run = run_to_end(fcli, plan_file(tmp_path, project, "turns", max_seq=512, truncation="oldest"))
    assert run["phase"] == "COMPLETED", run.get("failureReason")
    fit = run["results"]["dataFit"]
    assert (fit["trimmed"], fit["turnsRemoved"]) == (trimmed, turns_removed), removed
    assert fit["rows"] == len(rows) and fit["tooLong"] == 0 and fit["cut"] == 0
    text = fcli.ok("training", "runs", "get", run["runId"]).out
    assert f"Data fit     {trimmed} row(s) trimmed, {turns_removed} oldest turn(s) removed" in text


def test_oldest_trims_rows_shorter_than_the_analysis_trim_threshold(fcli, independent, tmp_path):
    """maxSeqLength 256: rows of 257 to 512 tokens that fit once their oldest turns are removed."""
    rows = [conversation(1, 10), conversation(2, 60), conversation(3, 60), conversation(3, 40)]
    trimmed, turns_removed, removed = trim_figures(independent, rows, 256)
    assert None not in removed and trimmed >= 2, removed
    assert all(256 < independent.length(row["messages"]) <= 512 for row, r in zip(rows, removed, strict=True) if r)
    project = project_with(fcli, tmp_path, {"turns": rows})
    run = run_to_end(fcli, plan_file(tmp_path, project, "turns", max_seq=256, truncation="oldest"))
    assert run["phase"] == "COMPLETED", run.get("failureReason")
    fit = run["results"]["dataFit"]
    assert (fit["trimmed"], fit["turnsRemoved"]) == (trimmed, turns_removed)


# 4. oldest with a row that cannot fit even trimmed, and oldest_or_drop -------------------------------------------

def test_a_row_that_cannot_fit_trimmed_is_refused_under_oldest_and_left_out_under_oldest_or_drop(
        fcli, independent, tmp_path):
    rows = [conversation(1, 10), conversation(4, 60), conversation(3, 60, last_words=250), conversation(6, 40)]
    trimmed, turns_removed, removed = trim_figures(independent, rows, 512)
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

    run = run_to_end(fcli, plan_file(tmp_path, project, "turns", 512, "oldest_or_drop"))
    assert run["phase"] == "COMPLETED", run.get("failureReason")
    fit = run["results"]["dataFit"]
    assert fit["tooLong"] == 1 and fit["rows"] == len(rows) - 1
    assert (fit["trimmed"], fit["turnsRemoved"]) == (trimmed, turns_removed)
    text = fcli.ok("training", "runs", "get", run["runId"]).out
    assert (f"Data fit     1 row(s) longer than maxSeqLength left out (tooLong); {trimmed} row(s) trimmed, "
            f"{turns_removed} oldest turn(s) removed") in text


def test_oldest_refuses_a_long_row_carrying_an_explicit_mask(fcli, independent, tmp_path):
    long_row = conversation(4, 60)
    length = independent.length(long_row["messages"])
    assert length > 512
    rows = [masked(independent, chat_row("hi", "hello")), {**long_row, "mask": [0] * (length - 3) + [1] * 3}]
    project = project_with(fcli, tmp_path, {"masked": rows})
    run = run_to_end(fcli, plan_file(tmp_path, project, "masked", 512, "oldest", mask_column="mask"))
    assert run["phase"] == "FAILED"
    assert (f"{project}/masked:v1 line 2 is {length} tokens long and carries 'mask', whose mask covers the whole "
            "conversation, so its oldest turns cannot be removed") in run["failureReason"]


# 5. right ---------------------------------------------------------------------------------------------------------

def masked(independent: Independent, row: dict, select: range | None = None, column: str = "mask") -> dict:
    """The row with a mask of one entry per rendered token: `select` (default: the last 3 tokens) trains."""
    length = independent.length(row["messages"])
    select = select if select is not None else range(length - 3, length)
    return {**row, column: [1 if i in select else 0 for i in range(length)]}


def test_right_needs_explicit_masks_and_cuts_only_past_them(fcli, independent, tmp_path):
    long = [chat_row("word " * words, "ok") for words in (120, 200)]
    assert all(independent.length(row["messages"]) > 256 for row in long)
    rows = ([masked(independent, row) for row in short_rows(3)] + [chat_row("no mask here", "fine")]
            + [masked(independent, row, range(10, 30)) for row in long])
    project = project_with(fcli, tmp_path, {"masked": rows})

    refused = fcli("training", "runs", "start", "-f", plan_file(tmp_path, project, "masked", truncation="right"),
                   "--force")
    assert refused.code == 1 and "data.truncation: right would cut" in one_line(refused.err)
    assert runs_of(fcli, project) == []

    run = run_to_end(fcli, plan_file(tmp_path, project, "masked", truncation="right", mask_column="mask"))
    assert run["phase"] == "COMPLETED", run.get("failureReason")
    fit = run["results"]["dataFit"]
    assert fit["cut"] == 2 and fit["rows"] == len(rows) and fit["tooLong"] == 0
    text = fcli.ok("training", "runs", "get", run["runId"]).out
    assert "Data fit     2 row(s) cut at maxSeqLength past their mask" in text

    past = chat_row("word " * 120, "ok")
    length = independent.length(past["messages"])
    bad = project_with(fcli, tmp_path, {"masked": [masked(independent, short_rows(1)[0]), masked(independent, past)]})
    failed = run_to_end(fcli, plan_file(tmp_path, bad, "masked", truncation="right", mask_column="mask"))
    assert failed["phase"] == "FAILED"
    assert (f"{bad}/masked:v1 line 2 is {length} tokens long and its mask selects tokens past maxSeqLength 256, "
            "which data.truncation: right would cut") in failed["failureReason"]


# 6. explicit masks ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["wrong length", "not 0 or 1", "first token", "no token"])
def test_a_malformed_mask_fails_the_run_naming_its_line(fcli, independent, tmp_path, case):
    row = chat_row("What is the capital of France?", "Paris.")
    length = independent.length(row["messages"])
    mask, words = {
        "wrong length": ([0] * length + [1], f"'mask' has {length + 1} values but the row renders to {length} tokens"),
        "not 0 or 1": ([0] * (length - 1) + [2], "'mask' must be a non-empty list of integer 0 and 1 values"),
        "first token": ([1] * length, "'mask' selects the first token, which cannot be trained"),
        "no token": ([0] * length, "'mask' selects no token"),
    }[case]
    rows = [masked(independent, r) for r in short_rows(2)] + [{**row, "mask": mask}]
    project = project_with(fcli, tmp_path, {"masked": rows})
    run = run_to_end(fcli, plan_file(tmp_path, project, "masked", mask_column="mask"))
    assert run["phase"] == "FAILED"
    assert run["failureReason"].startswith(f"{project}/masked:v1 line 3: {words}"), run["failureReason"]
    assert "remove loss.explicitLossMaskColumn" in run["failureReason"]


def test_a_dataset_without_any_mask_fails_the_run(fcli, tmp_path):
    project = project_with(fcli, tmp_path, {"plain": short_rows(4)})
    run = run_to_end(fcli, plan_file(tmp_path, project, "plain", mask_column="mask"))
    assert run["phase"] == "FAILED"
    assert run["failureReason"].startswith(f"{project}/plain:v1 holds no row with a mask under 'mask', which "
                                           "loss.explicitLossMaskColumn names"), run["failureReason"]


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
