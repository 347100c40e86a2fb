"""Supervised runs through the CLI and API against a real server, a real worker and real TRL training on a
stand-in model on CPU: from plan to registered model, on SQLite and PostgreSQL stores."""

from __future__ import annotations

import contextlib
import io
import json
import uuid

import httpx
import pytest
import yaml

from tests.conftest import Cli, chat_row, pair_row, write_jsonl

pytestmark = pytest.mark.integration
MODEL = "optimize/tiny-llama-3.2"
CAPITALS = [("France", "Paris"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Japan", "Tokyo"),
            ("Egypt", "Cairo"), ("Peru", "Lima"), ("Kenya", "Nairobi"), ("Chile", "Santiago")]


def plan(project: str, dataset: str, **overrides) -> dict:
    document = {
        "kind": "run", "project": project, "baseModel": MODEL,
        "config": {"dataset": dataset, "maxSeqLength": 256,
                   "hyperparams": {"optimizer": {"learningRate": 0.01},
                                   "training": {"maxSteps": 16, "batchSize": 4}}},
        "execution": {"deviceProfile": "cpu", "saveEvery": 6},
    }
    for key, value in overrides.items():
        document[key] = value
    return document


def capitals_project(url: str, tmp, prefix: str, copies: int = 2) -> dict:
    """A project of its own on a shared server (its name starts with `prefix`), the stand-in model selected and a
    chat dataset of capitals registered in its namespace as NAME/chat."""
    name = f"{prefix}{uuid.uuid4().hex[:8]}"
    client = httpx.Client(base_url=url, timeout=600)
    client.post(f"/v1/training/base-models/{MODEL}/select", json={}).raise_for_status()
    rows = [chat_row(f"What is the capital of {country}?", f"The capital of {country} is {city}.")
            for country, city in CAPITALS] * copies
    from optimize.cli.main import main

    assert main(["registry", "datasets", "register", f"{name}/chat", "-f", str(write_jsonl(tmp / "t.jsonl", rows)),
                 "--server", url]) == 0
    client.post("/v1/training/projects", json={"name": name}).raise_for_status()
    return {"name": name, "project": name, "client": client, "tmp": tmp}


def write_plan(tmp_path, document: dict) -> str:
    path = tmp_path / f"plan-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump(document))
    return str(path)


@pytest.fixture(scope="module")
def trained(server, tmp_path_factory):
    """One project with a chat dataset (and a validation set), trained once per store backend."""
    tmp = tmp_path_factory.mktemp("runs")
    project = f"p{uuid.uuid4().hex[:8]}"
    client = httpx.Client(base_url=server.url, timeout=600)
    client.post(f"/v1/training/base-models/{MODEL}/select", json={}).raise_for_status()
    rows = [chat_row(f"What is the capital of {country}?", f"The capital of {country} is {city}.")
            for country, city in CAPITALS] * 4
    train_file = write_jsonl(tmp / "train.jsonl", rows)
    valid_file = write_jsonl(tmp / "valid.jsonl", rows[:8])
    from optimize.cli.main import main

    assert main(["registry", "datasets", "register", f"{project}/chat", "-f", str(train_file), "--alias", "train",
                 "--server", server.url]) == 0
    assert main(["registry", "datasets", "register", f"{project}/valid", "-f", str(valid_file),
                 "--server", server.url]) == 0
    assert main(["training", "projects", "create", project, "--server", server.url]) == 0
    document = plan(project, "chat:train")  # no namespace: resolves inside the project's namespace
    document["config"]["validation"] = {"dataset": f"{project}/valid"}
    document["submissionId"] = f"sub-{project}"
    path = write_plan(tmp, document)
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):  # a module fixture has no capsys
        code = main(["training", "runs", "start", "-f", path, "--force", "--wait", "--exit-status", "-o",
                     "json-compact", "--server", server.url])
    lines = [json.loads(line) for line in buffer.getvalue().splitlines() if line.strip()]
    return {"project": project, "code": code, "lines": lines, "run": lines[-1], "plan": document, "path": path,
            "client": client}


def test_a_run_trains_from_plan_to_registered_model(trained, server, capsys):
    assert trained["code"] == 0, trained["lines"][-1]
    run = trained["run"]
    assert run["phase"] == "COMPLETED" and run["attempt"] == 1
    assert run["dataset"]["reference"] == f"{trained['project']}/chat:v1"
    assert run["results"]["model"] == f"{trained['project']}/tiny-llama-3.2:v1"
    assert run["checks"]["status"] == "passed" and run["checks"]["checks"][0]["name"] == "reference"
    cost = run["cost"]
    assert cost["deviceSeconds"] > 0 and cost["tokensPerSecondPerDevice"] > 0 and cost["hostMemoryGiB"] > 0
    assert cost["duration"]["training"] > 0 and cost["duration"]["preparing"] > 0

    cli = Cli(capsys, server.url)
    metrics = cli.json("training", "runs", "metrics", run["runId"][:8])
    losses = [step["loss"] for step in metrics["steps"]]
    assert [step["step"] for step in metrics["steps"]] == list(range(1, 17))
    assert sum(losses[-4:]) / 4 < sum(losses[:4]) / 4 - 0.2, losses  # it learns
    assert all(step["learningRate"] >= 0 and step["gradNorm"] > 0 and step["tokens"] > 0 for step in metrics["steps"])
    assert {v["step"] for v in metrics["validation"]} >= {6, 12, 16}
    assert run["results"]["validationLoss"] == pytest.approx(metrics["validation"][-1]["validationLoss"])


def test_wait_follows_the_run_a_line_per_change_then_the_record(trained):
    phases = [line["phase"] for line in trained["lines"][:-1]]
    assert phases[-1] == "COMPLETED"
    assert "TRAINING" in phases
    order = ["QUEUED", "PREPARING", "TRAINING", "COMPLETED"]
    assert [p for p in order if p in phases] == [p for p in dict.fromkeys(phases)]  # never goes back


def test_snapshots_are_listed_with_both_kinds(trained, server, capsys):
    snapshots = Cli(capsys, server.url).json("training", "runs", "snapshots", trained["run"]["runId"])["snapshots"]
    assert [s["step"] for s in snapshots] == [6, 12, 16]
    assert snapshots[-1]["final"] and not snapshots[0]["final"]
    for snapshot in snapshots:  # a save with a newer one queued behind it may upload its weights alone
        kinds = {a["kind"]: a for a in snapshot["artifacts"]}
        assert "adapter_model.safetensors" in kinds["weights"]["files"]
    final = {a["kind"]: a for a in snapshots[-1]["artifacts"]}
    assert "optimizer.pt" in final["trainingState"]["files"]
    text = Cli(capsys, server.url).ok("training", "runs", "snapshots", trained["run"]["runId"]).out
    assert "1 to 3 of 3 snapshots." in text


def test_the_model_is_registered_with_its_lineage(trained, server, capsys):
    cli = Cli(capsys, server.url)
    run = trained["run"]
    model = cli.json("registry", "models", "get", run["results"]["model"])
    assert model["variant"] == "ADAPTER"
    assert model["lineage"]["baseModel"] == "optimize/tiny-llama-3.2:v1"
    assert model["lineage"]["producedBy"]["id"] == run["runId"]
    datasets = {d["role"]: d["reference"] for d in model["lineage"]["datasets"]}
    assert datasets == {"training": f"{trained['project']}/chat:v1", "validation": f"{trained['project']}/valid:v1"}
    serving = model["servingModel"]
    assert serving["adapterRank"] == 8 and "q_proj" in serving["modules"]
    assert serving["weightsDigest"] == run["results"]["weightsDigest"]
    final = cli.json("training", "runs", "snapshots", run["runId"])["snapshots"][-1]
    weights = next(a for a in final["artifacts"] if a["kind"] == "weights")
    assert serving["artifact"]["manifestDigest"] == weights["manifestDigest"]
    text = cli.ok("registry", "models", "get", run["results"]["model"]).out
    assert f"run {run['runId']}" in text and "optimize/tiny-llama-3.2:v1" in text


def test_get_shows_sections_and_settings_marks_stated_values(trained, server, capsys):
    cli = Cli(capsys, server.url)
    text = cli.ok("training", "runs", "get", trained["run"]["runId"][:10], "--settings").out
    for heading in ("State", "Results", "Cost", "Settings", "Start checks", "Duration", "Throughput"):
        assert heading in text
    assert "config.hyperparams.optimizer.learningRate = 0.01 (stated)" in text
    assert "config.hyperparams.lora.rank = 8\n" in text  # a default, not marked
    assert "config.model.precision = 'fp32'\n" in text  # resolved for the cpu profile
    settings = cli.json("training", "runs", "get", trained["run"]["runId"], "--settings")["settings"]
    assert settings["execution.saveEvery"] == {"value": 6, "source": "stated"}
    assert settings["config.seed"] == {"value": 0, "source": "default"}


def test_list_filters_by_project_and_phase(trained, server, capsys):
    cli = Cli(capsys, server.url)
    mine = cli.json("training", "runs", "list", "--project", trained["project"])["runs"]
    assert [r["runId"] for r in mine] == [trained["run"]["runId"]]
    assert cli.json("training", "runs", "list", "--project", trained["project"], "--phase", "open")["runs"] == []
    done = cli.json("training", "runs", "list", "--project", trained["project"], "--phase", "completed")["runs"]
    assert len(done) == 1
    bad = cli("training", "runs", "list", "--phase", "sleeping")
    assert bad.code == 1 and "is not a run phase" in bad.err


def test_same_submission_id_reaches_the_same_run(trained):
    client = trained["client"]
    again = client.post("/v1/training/runs", json=trained["plan"])
    assert again.status_code == 200 and again.json()["runId"] == trained["run"]["runId"]
    changed = json.loads(json.dumps(trained["plan"]))
    changed["config"]["seed"] = 7
    refused = client.post("/v1/training/runs", json=changed)
    assert refused.status_code == 409 and "was used for another plan" in refused.json()["detail"]
    listed = client.get("/v1/training/runs", params={"project": trained["project"]}).json()["runs"]
    assert len(listed) == 1


def test_events_stream_sends_the_current_state_first(trained, server):
    with httpx.stream("GET", f"{server.url}/v1/training/runs/{trained['run']['runId']}/events", timeout=10) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines()]
    assert lines[0] == "event: status"
    first = json.loads(lines[1][len("data:"):])
    assert first["phase"] == "COMPLETED" and first["runId"] == trained["run"]["runId"]


def test_unknown_plan_field_is_refused_by_its_path(trained, server, capsys, tmp_path):
    document = plan(trained["project"], "chat:train")
    document["config"]["hyperparams"]["lora"] = {"rnak": 4}
    cli = Cli(capsys, server.url)
    result = cli("training", "runs", "start", "-f", write_plan(tmp_path, document), "--force")
    assert result.code == 1 and "config.hyperparams.lora.rnak: unknown field" in result.err
    refused = trained["client"].post("/v1/training/runs", json=document)
    assert refused.status_code == 422 and "config.hyperparams.lora.rnak: unknown field" in refused.json()["detail"]


@pytest.mark.parametrize("change, words", [
    ({"project": "nosuchproject"}, "training project 'nosuchproject' does not exist"),
    ({"baseModel": "optimize/tiny-qwen2.5"}, "is not selected on this deployment"),
    ({"baseModel": "google/gemma-4-26b-a4b-it"}, "allowed for serving only and cannot train"),
    ({"config": {"dataset": "nope/nothing", "method": "sft"}}, "dataset nope/nothing does not exist"),
    ({"config": {"dataset": "chat:train", "method": "dpo"}}, "holds chat rows; method dpo trains on preference pairs"),
    ({"config": {"dataset": "chat:train", "method": "grpo"}}, "method grpo is not trained on this deployment yet"),
    ({"config": {"dataset": "chat:train", "data": {"truncation": "right"}}}, "data.truncation: right would cut"),
    ({"config": {"dataset": "chat:train", "hyperparams": {"lora": {"adaptExperts": True}}}},
     "has no expert weights that lora.adaptExperts could adapt"),
])
def test_refusals_at_submission_name_what_to_change(trained, change, words):
    document = {**plan(trained["project"], "chat:train"), **change}
    before = trained["client"].get("/v1/training/runs").json()["runs"]
    refused = trained["client"].post("/v1/training/runs", json=document)
    assert refused.status_code in (400, 404, 422) and words in refused.json()["detail"], refused.json()
    assert refused.json().get("hint")
    assert trained["client"].get("/v1/training/runs").json()["runs"] == before  # nothing stored


def test_work_this_deployment_can_never_train_is_refused_at_submission(trained, server, capsys, tmp_path):
    cli = Cli(capsys, server.url)
    before = cli.json("training", "runs", "list")["runs"]
    for execution, words, hint in (
            ({"deviceProfile": "h200", "gpus": 1},
             "execution.deviceProfile 'h200' is not a device profile of this deployment; profiles here: cpu (1 device)",
             "set execution.deviceProfile to one of them"),
            ({"deviceProfile": "cpu", "gpus": 3},
             "execution.gpus 3 asks for more devices of profile 'cpu' than this deployment has (cpu (1 device))",
             "set execution.gpus to 1 or fewer")):
        path = write_plan(tmp_path, plan(trained["project"], "chat:train", execution=execution))
        for flags in ((), ("--dry-run",)):
            result = cli("training", "runs", "start", "-f", path, "--force", *flags)
            assert result.code == 1 and words in result.err and hint in result.err, result.err
    assert cli.json("training", "runs", "list")["runs"] == before  # nothing stored


def test_a_long_row_is_refused_before_a_device_then_at_submission(trained, server, capsys, tmp_path):
    cli = Cli(capsys, server.url)
    rows = [chat_row("short", "ok"), chat_row("long " * 400, "ok"), chat_row("longer " * 500, "ok")]
    cli.ok("registry", "datasets", "register", f"{trained['project']}/long", "-f",
           str(write_jsonl(tmp_path / "long.jsonl", rows)))
    path = write_plan(tmp_path, plan(trained["project"], "long"))
    run = cli.json("training", "runs", "start", "-f", path, "--force")
    assert run["lengthCheck"]["status"] == "waiting"  # no analysis yet: one is started, the run waits for it
    cli("training", "runs", "wait", run["runId"], "--timeout", "120")
    final = cli.json("training", "runs", "get", run["runId"])
    assert final["phase"] == "FAILED" and final["attempt"] == 0  # refused before it claimed a device
    reason = final["failureReason"]
    assert reason.startswith("the run is refused before it claims a device: 2 row(s) of ")
    assert f"{trained['project']}/long:v1 are longer than maxSeqLength 256: line 3 (" in reason  # longest first
    assert "), line 2 (" in reason and "measured by analysis" in reason and "under optimize/tiny-llama-3.2 at" in reason
    assert "set data.truncation: drop" in reason
    # the analysis is done now: the same plan is refused at submission, and nothing is stored
    before = cli.json("training", "runs", "list", "--project", trained["project"])["runs"]
    again = cli("training", "runs", "start", "-f", path, "--force")
    assert again.code == 1 and "2 row(s) of" in again.err and "line 3 (" in again.err
    assert cli.json("training", "runs", "list", "--project", trained["project"])["runs"] == before


def test_a_run_whose_check_did_not_run_refuses_a_long_row_when_it_reads_it(server_factory, tmp_path, capsys):
    proc = server_factory("nowait", env={"OPTIMIZE_ANALYSIS_WAIT_SECONDS": "0"})
    cli = Cli(capsys, proc.url)
    cli.ok("training", "base-models", "select", MODEL)
    cli.ok("registry", "datasets", "register", "nw/long", "-f",
           str(write_jsonl(tmp_path / "l.jsonl", [chat_row("short", "ok"), chat_row("long " * 400, "ok")])))
    cli.ok("training", "projects", "create", "nw")
    run = cli.json("training", "runs", "start", "-f", write_plan(tmp_path, plan("nw", "long")), "--force")
    cli("training", "runs", "wait", run["runId"], "--timeout", "120")
    final = cli.json("training", "runs", "get", run["runId"])
    assert final["lengthCheck"]["status"] == "notRun"
    assert final["phase"] == "FAILED" and final["attempt"] == 1
    assert "nw/long:v1 line 2 is " in final["failureReason"]
    assert "longer than maxSeqLength 256" in final["failureReason"]
    capacity = cli.json("training", "capacity")
    assert capacity["claims"] == []  # devices released


def test_projects_create_get_list(server, capsys):
    cli = Cli(capsys, server.url)
    name = f"proj{uuid.uuid4().hex[:6]}"
    created = cli.json("training", "projects", "create", name, "--description", "first")
    assert created["namespace"] == name and created["runs"] == 0
    assert cli.json("training", "projects", "create", name)["name"] == name  # idempotent
    assert cli.json("training", "projects", "get", name)["description"] == "first"
    assert name in [p["name"] for p in cli.json("training", "projects", "list")["projects"]]
    for bad, words in (("abcdef12", "looks like an id"), ("counts", "is reserved"), ("Bad Name!", "not a valid name")):
        result = cli("training", "projects", "create", bad)
        assert result.code == 1 and words in result.err
    missing = cli("training", "projects", "get", "nothere")
    assert missing.code == 1 and "does not exist" in missing.err


def test_a_run_outside_every_measured_envelope_is_admitted_with_a_warning(trained, server, capsys, tmp_path):
    cli = Cli(capsys, server.url)
    document = plan(trained["project"], "chat:train")
    document["config"]["maxSeqLength"] = 2048  # the stand-in's cpu envelope was measured up to 512 tokens
    document["config"]["hyperparams"]["training"]["maxSteps"] = 1
    result = cli("training", "runs", "start", "-f", write_plan(tmp_path, document), "--force")
    assert result.code == 0 and "may run out of device memory" in result.err
    run_id = result.out.split()[1]
    shown = cli.json("training", "runs", "get", run_id)
    assert shown["warnings"] and "with maxSeqLength 2048" in shown["warnings"][0]
    assert "Warning      unmeasured" in cli.ok("training", "runs", "get", run_id).out
    cli("training", "runs", "wait", run_id, "--timeout", "120")


def test_a_strict_catalog_refuses_a_run_outside_every_envelope(server_factory, tmp_path, capsys):
    from pathlib import Path

    catalog = yaml.safe_load((Path(__file__).resolve().parents[2] / "catalogs" / "default.yaml").read_text())
    catalog["trainer"]["base-model-catalog"]["strict-envelopes"] = True
    strict = tmp_path / "strict.yaml"
    strict.write_text(yaml.safe_dump(catalog))
    proc = server_factory("strict", extra_args=["--catalog", str(strict)])
    cli = Cli(capsys, proc.url)
    cli.ok("training", "base-models", "select", MODEL)
    cli.ok("registry", "datasets", "register", "strict/chat", "-f",
           str(write_jsonl(tmp_path / "c.jsonl", [chat_row()])))
    cli.ok("training", "projects", "create", "strict")
    document = plan("strict", "chat")
    document["config"]["maxSeqLength"] = 4096
    result = cli("training", "runs", "start", "-f", write_plan(tmp_path, document), "--force")
    assert result.code == 1
    assert "no measured training envelope of optimize/tiny-llama-3.2 covers sft at fp32 on 1 cpu slot" in result.err
    assert "this deployment requires one" in result.err and "hint:" in result.err
    # a dpo run needs a dpo measurement: the sft envelope that covers its length does not count
    cli.ok("registry", "datasets", "register", "strict/prefs", "-f",
           str(write_jsonl(tmp_path / "p.jsonl", [pair_row()])))
    document = plan("strict", "prefs")
    document["config"]["method"] = "dpo"
    result = cli("training", "runs", "start", "-f", write_plan(tmp_path, document), "--force")
    assert result.code == 1 and "covers dpo at fp32 on 1 cpu slot with maxSeqLength" in result.err, result.err
    assert cli.json("training", "runs", "list")["runs"] == []


@pytest.mark.parametrize("truncation", ["error", "drop"])
def test_rows_the_template_renders_without_a_part_are_refused_under_every_truncation(trained, server, capsys, tmp_path,
                                                                                    truncation):
    from tests.row_cases import TOOLS

    cli = Cli(capsys, server.url)
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "12"}'}}
    rows = [chat_row("hi", "hello"),
            {"messages": [{"role": "user", "content": "find 12"},
                          {"role": "assistant", "content": "checking", "tool_calls": [call]},
                          {"role": "tool", "tool_call_id": "c1", "content": "shipped"},
                          {"role": "assistant", "content": "It shipped."}], "tools": TOOLS}]
    name = f"{trained['project']}/calls"
    cli.ok("registry", "datasets", "register", name, "-f", str(write_jsonl(tmp_path / "calls.jsonl", rows)))
    cli.ok("training", "datasets", "analyze", name, "--model", MODEL, "--wait")
    document = plan(trained["project"], "calls")
    document["config"]["data"] = {"truncation": truncation}
    result = cli("training", "runs", "start", "-f", write_plan(tmp_path, document), "--force")
    assert result.code == 1
    assert (f"the chat template refuses or drops part of 1 row(s) of {name}:v1: line 2 (message 1: the chat "
            "template renders the message without its text)") in " ".join(result.err.split())
