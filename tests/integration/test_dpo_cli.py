"""dpo runs through the CLI and the API against a real server and real workers, TRL's DPOTrainer on the CPU stand-in:
from the base model with each loss, and from a supervised run's adapter through a weights branch; preference accuracy
and reward margin per update, rising on an easy preference set; refusals by their words; pause and resume."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from tests.conftest import Cli, chat_row, from_standin, write_jsonl
from tests.integration.test_run_lifecycle import followed, wait_until
from tests.run_fixtures import MODEL, write_plan

pytestmark = pytest.mark.integration
TICKETS = [("my invoice is wrong", "billing"), ("I was charged twice", "billing"), ("where is my package", "shipping"),
           ("the box came damaged", "shipping")]


def pair(text: str, label: str) -> dict:
    return {"prompt": [{"role": "user", "content": f"Label this ticket: {text}"}],
            "chosen": {"role": "assistant", "content": json.dumps({"label": label})},
            "rejected": {"role": "assistant", "content": "I cannot help with that."}}


def dpo_plan(name: str, steps: int = 20, **preference) -> dict:
    return {"kind": "run", "project": name, "baseModel": MODEL, "modelName": "preferred",
            "config": {"method": "dpo", "dataset": "prefs", "maxSeqLength": 256, "seed": 5,
                       "preference": preference,
                       "hyperparams": {"optimizer": {"learningRate": 0.01},
                                       "training": {"maxSteps": steps, "batchSize": 4}}},
            "execution": {"deviceProfile": "cpu"}}


@pytest.fixture(scope="module")
def prefs(sqlite_server, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dpo")
    name = f"dp{uuid.uuid4().hex[:8]}"
    client = httpx.Client(base_url=sqlite_server.url, headers=sqlite_server.headers, timeout=600)
    client.post(f"/v1/training/base-models/{MODEL}/select", json=from_standin(MODEL)).raise_for_status()
    from optimize.cli.main import main

    pairs = write_jsonl(tmp / "p.jsonl", [pair(t, label) for t, label in TICKETS] * 4)
    chats = write_jsonl(tmp / "c.jsonl", [chat_row(f"Label this ticket: {t}", json.dumps({"label": label}))
                                          for t, label in TICKETS] * 2)
    for dataset, path in (("prefs", pairs), ("chat", chats)):
        assert main(["registry", "datasets", "register", f"{name}/{dataset}", "-f", str(path), "--server",
                     sqlite_server.url]) == 0
    client.post("/v1/training/projects", json={"name": name}).raise_for_status()
    return {"name": name, "client": client, "tmp": tmp}


@pytest.mark.parametrize("loss", ["sigmoid", "ipo"])
def test_a_dpo_run_from_the_base_model_reports_accuracy_and_margin_rising(prefs, sqlite_server, capsys, loss):
    cli = Cli(capsys, sqlite_server.url)
    done = followed(cli, "training", "runs", "start", "-f", write_plan(prefs["tmp"], dpo_plan(
        prefs["name"], lossType=loss)), "--force", "--wait", "--exit-status")
    assert done["phase"] == "COMPLETED" and done["method"] == "dpo", done["failureReason"]
    preference = done["results"]["preference"]
    assert preference["lossType"] == loss and preference["loss"] == "trl" and preference["beta"] == 0.1
    assert preference["accuracy"] == 1.0 and preference["rewardMargin"] > 0
    # the fused loss is never left out silently: the run says it computes TRL's own on the cpu profile
    assert any("Liger's fused DPO loss needs a GPU" in w for w in done["warnings"]), done["warnings"]
    # an advisory catalog admits the unmeasured dpo run with the warning (only sft is measured for the stand-in)
    assert any(w.startswith("unmeasured:") and "covers dpo at fp32" in w for w in done["warnings"])
    settings = cli.json("training", "runs", "get", done["runId"], "--settings")["settings"]
    assert settings["config.model.gradientCheckpointing"] == {"value": True, "source": "default"}
    assert settings["config.preference.fusedLoss"] == {"value": False, "source": "default"}

    steps = cli.json("training", "runs", "metrics", done["runId"])["steps"]
    assert [m["step"] for m in steps] == list(range(1, 21))
    first, last = steps[0], steps[-1]
    assert first["preferenceAccuracy"] <= last["preferenceAccuracy"] == 1.0
    assert first["rewardMargin"] < steps[9]["rewardMargin"] < last["rewardMargin"]
    assert last["loss"] < first["loss"]
    text = cli.ok("training", "runs", "get", done["runId"][:10]).out
    assert "Preference   accuracy 1.000" in text and f"{loss} loss (beta 0.1) computed with TRL's loss" in text
    table = cli.ok("training", "runs", "metrics", done["runId"], "--limit", "3").out
    assert "ACCURACY" in table and "MARGIN" in table


def test_a_dpo_run_branches_from_a_supervised_runs_adapter(prefs, sqlite_server, capsys):
    cli = Cli(capsys, sqlite_server.url)
    sft = {"kind": "run", "project": prefs["name"], "baseModel": MODEL, "modelName": "labeller",
           "config": {"dataset": "chat", "maxSeqLength": 256,
                      "hyperparams": {"optimizer": {"learningRate": 0.01}, "training": {"maxSteps": 6,
                                                                                        "batchSize": 4}}}}
    parent = followed(cli, "training", "runs", "start", "-f", write_plan(prefs["tmp"], sft), "--force", "--wait",
                      "--exit-status")
    overrides = prefs["tmp"] / "dpo-overrides.yaml"
    overrides.write_text("method: dpo\ndataset: prefs\npreference: {beta: 0.2}\nvalidation: {dataset: prefs}\n")
    cli.ok("training", "datasets", "analyze", f"{prefs['name']}/prefs", "--model", MODEL, "--wait")
    dry = cli.ok("training", "runs", "branch", parent["runId"], "--restore", "weights", "--overrides",
                 str(overrides), "--max-steps", "8", "--dry-run").out
    assert "16 pairs; median" in dry  # the Lengths section counts pairs
    child = followed(cli, "training", "runs", "branch", parent["runId"], "--restore", "weights", "--overrides",
                     str(overrides), "--max-steps", "8", "--wait", "--exit-status")
    assert child["phase"] == "COMPLETED" and child["method"] == "dpo", child["failureReason"]
    assert child["parentRunId"] == parent["runId"] and child["branch"]["restore"] == "weights"
    assert child["results"]["preference"]["beta"] == 0.2 and child["results"]["preference"]["accuracy"] == 1.0
    assert child["results"]["model"].startswith(f"{prefs['name']}/labeller:")
    assert child["results"]["validationLoss"] is not None  # validated on pairs too
    validation = cli.json("training", "runs", "metrics", child["runId"])["validation"]
    assert validation and validation[-1]["step"] == 8


def test_dpo_refusals_name_what_to_change(prefs, sqlite_server, capsys):
    client = prefs["client"]
    before = client.get("/v1/training/runs", params={"project": prefs["name"]}).json()["runs"]
    on_chat = {**dpo_plan(prefs["name"]), "config": {**dpo_plan(prefs["name"])["config"], "dataset": "chat"}}
    refused = client.post("/v1/training/runs", json=on_chat)
    assert refused.status_code == 400 and "holds chat rows; method dpo trains on preference pairs" in \
        refused.json()["detail"]
    # once the analysis of the pairs is done, a pair longer than maxSeqLength is refused at submission, named with
    # its length
    cli = Cli(capsys, sqlite_server.url)
    cli.ok("training", "datasets", "analyze", f"{prefs['name']}/prefs", "--model", MODEL, "--wait")
    short = dpo_plan(prefs["name"])
    short["config"]["maxSeqLength"] = 24
    refused = client.post("/v1/training/runs", json=short)
    assert refused.status_code == 400, refused.json()
    detail = refused.json()["detail"]
    assert "the run is refused before it claims a device" in detail and "pair(s) of" in detail, detail
    assert "line 1 (" in detail and "shorten the pairs" in detail
    trimmed = dpo_plan(prefs["name"])
    trimmed["config"]["data"] = {"truncation": "oldest"}
    refused = client.post("/v1/training/runs", json=trimmed)
    assert refused.status_code == 400 and "a dpo run keeps or leaves out whole pairs" in refused.json()["detail"]
    assert client.get("/v1/training/runs", params={"project": prefs["name"]}).json()["runs"] == before


def test_a_dpo_run_pauses_and_resumes(prefs, sqlite_server, capsys):
    cli, client = Cli(capsys, sqlite_server.url), prefs["client"]
    document = dpo_plan(prefs["name"], steps=80)  # the pause lands within a few updates; the rest trains after it
    document["execution"]["saveEvery"] = 20
    run_id = cli.json("training", "runs", "start", "-f", write_plan(prefs["tmp"], document), "--force")["runId"]
    wait_until(client, run_id, lambda r: r["phase"] == "TRAINING" and r["progress"].get("observedStep", 0) >= 2)
    cli.ok("training", "runs", "pause", run_id, "--checkpoint", "save")
    paused = followed(cli, "training", "runs", "wait", run_id)
    assert paused["phase"] == "PAUSED" and paused["pause"]["savedStep"] >= 2, paused
    resumed = cli.json("training", "runs", "resume", run_id)
    assert resumed["resumed"]["optimizerState"] is True
    done = followed(cli, "training", "runs", "wait", run_id)
    assert done["phase"] == "COMPLETED" and done["attempt"] == 2, done["failureReason"]
    steps = [m["step"] for m in cli.json("training", "runs", "metrics", run_id)["steps"]]
    assert steps == list(range(1, 81)) and done["results"]["preference"]["accuracy"] == 1.0


@pytest.mark.parametrize("truncation", ["error", "drop"])
def test_a_pair_the_template_cannot_render_after_its_prompt_is_refused_by_its_line(prefs, sqlite_server, capsys,
                                                                                  tmp_path, truncation):
    from tests.row_cases import TOOLS

    cli = Cli(capsys, sqlite_server.url)
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": {"q": "12"}}}
    # Llama 3.2's template writes a call without the text beside it: the chosen answer loses its text
    dropped = {"prompt": [{"role": "user", "content": "find 12"}], "tools": TOOLS,
               "chosen": {"role": "assistant", "content": "checking", "tool_calls": [call]},
               "rejected": {"role": "assistant", "content": "no idea"}}
    name = f"{prefs['name']}/dropped-{truncation}"
    cli.ok("registry", "datasets", "register", name, "-f",
           str(write_jsonl(tmp_path / "d.jsonl", [pair(*TICKETS[0]), dropped])))
    cli.ok("training", "datasets", "analyze", name, "--model", MODEL, "--wait")
    document = dpo_plan(prefs["name"])
    document["config"]["dataset"] = name
    document["config"]["data"] = {"truncation": truncation}
    result = cli("training", "runs", "start", "-f", write_plan(tmp_path, document), "--force")
    assert result.code == 1
    words = " ".join(result.err.split())
    assert f"the chat template refuses or drops part of 1 pair(s) of {name}:v1: line 2" in words, words
    assert "'chosen'" in words

