"""Supervised runs through the CLI and API against a real server, a real worker and real TRL training on a
stand-in model on CPU: from plan to registered model. The completed run is read on both stores (the session's
shared run on SQLite, the same run trained here once more on PostgreSQL: the run tables' smoke); submissions and
refusals, which the store does not decide, run on SQLite."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest
import yaml

from tests.conftest import Cli, built_standin, chat_row, headers_for, pair_row, write_jsonl
from tests.run_fixtures import MODEL, capitals_project, plan, train_capitals, write_plan

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def trained(request, tmp_path_factory):
    """One project with a chat dataset (and a validation set), trained to completion: on SQLite the session's
    `completed_run`, on PostgreSQL the same plan trained here."""
    if request.param == "sqlite":
        return request.getfixturevalue("completed_run")
    postgres = request.getfixturevalue("postgres_server")
    return train_capitals(postgres.url, tmp_path_factory.mktemp("runs-postgres"))


@pytest.fixture(scope="module")
def own_project(sqlite_server, tmp_path_factory):
    """A project of its own with capitals as NAME/chat, for the tests that add runs or datasets."""
    return capitals_project(sqlite_server.url, tmp_path_factory.mktemp("runs-own"), "own")


def test_a_run_trains_from_plan_to_registered_model(trained, capsys):
    assert trained["code"] == 0, trained["lines"][-1]
    run = trained["run"]
    assert run["phase"] == "COMPLETED" and run["attempt"] == 1
    assert run["dataset"]["reference"] == f"{trained['project']}/chat:v1"
    assert run["results"]["model"] == f"{trained['project']}/tiny-llama-3.2:v1"
    assert run["checks"]["status"] == "passed" and run["checks"]["checks"][0]["name"] == "reference"
    cost = run["cost"]
    assert cost["deviceSeconds"] > 0 and cost["tokensPerSecondPerDevice"] > 0 and cost["hostMemoryGiB"] > 0
    assert cost["duration"]["training"] > 0 and cost["duration"]["preparing"] > 0

    cli = Cli(capsys, trained["url"])
    metrics = cli.json("training", "runs", "metrics", run["runId"][:8])
    losses = [step["loss"] for step in metrics["steps"]]
    assert [step["step"] for step in metrics["steps"]] == list(range(1, 17))
    assert sum(losses[-4:]) / 4 < sum(losses[:4]) / 4 - 0.2, losses  # it learns
    assert all(step["learningRate"] >= 0 and step["gradNorm"] > 0 and step["tokens"] > 0 for step in metrics["steps"])
    assert {v["step"] for v in metrics["validation"]} >= {6, 12, 16}
    assert run["results"]["validationLoss"] == pytest.approx(metrics["validation"][-1]["validationLoss"])


def test_snapshots_are_listed_with_both_kinds(trained, capsys):
    snapshots = Cli(capsys, trained["url"]).json("training", "runs", "snapshots", trained["run"]["runId"])["snapshots"]
    assert [s["step"] for s in snapshots] == [6, 12, 16]
    assert snapshots[-1]["final"] and not snapshots[0]["final"]
    for snapshot in snapshots:  # a save with a newer one queued behind it may upload its weights alone
        kinds = {a["kind"]: a for a in snapshot["artifacts"]}
        assert "adapter_model.safetensors" in kinds["weights"]["files"]
    final = {a["kind"]: a for a in snapshots[-1]["artifacts"]}
    assert "optimizer.pt" in final["trainingState"]["files"]
    text = Cli(capsys, trained["url"]).ok("training", "runs", "snapshots", trained["run"]["runId"]).out
    assert "1 to 3 of 3 snapshots." in text


def test_the_model_is_registered_with_its_lineage(trained, capsys):
    cli = Cli(capsys, trained["url"])
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


def test_get_shows_sections_and_settings_marks_stated_values(trained, capsys):
    cli = Cli(capsys, trained["url"])
    text = cli.ok("training", "runs", "get", trained["run"]["runId"][:10], "--settings").out
    for heading in ("State", "Results", "Cost", "Settings", "Start checks", "Duration", "Throughput"):
        assert heading in text
    assert "config.hyperparams.optimizer.learningRate = 0.01 (stated)" in text
    assert "config.hyperparams.lora.rank = 8\n" in text  # a default, not marked
    assert "config.model.precision = 'fp32'\n" in text  # resolved for the cpu profile
    settings = cli.json("training", "runs", "get", trained["run"]["runId"], "--settings")["settings"]
    assert settings["execution.saveEvery"] == {"value": 6, "source": "stated"}
    assert settings["config.seed"] == {"value": 0, "source": "default"}


def test_list_filters_by_project_and_phase(trained, capsys):
    cli = Cli(capsys, trained["url"])
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


def test_events_stream_sends_the_current_state_first(trained):
    url = f"{trained['url']}/v1/training/runs/{trained['run']['runId']}/events"
    with httpx.stream("GET", url, timeout=10, headers=headers_for(trained["url"])) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines()]
    assert lines[0] == "event: status"
    first = json.loads(lines[1][len("data:"):])
    assert first["phase"] == "COMPLETED" and first["runId"] == trained["run"]["runId"]


def test_unknown_plan_field_is_refused_by_its_path(completed_run, capsys, tmp_path):
    document = plan(completed_run["project"], "chat:train")
    document["config"]["hyperparams"]["lora"] = {"rnak": 4}
    cli = Cli(capsys, completed_run["url"])
    result = cli("training", "runs", "start", "-f", write_plan(tmp_path, document), "--force")
    assert result.code == 1 and "config.hyperparams.lora.rnak: unknown field" in result.err
    refused = completed_run["client"].post("/v1/training/runs", json=document)
    assert refused.status_code == 422 and "config.hyperparams.lora.rnak: unknown field" in refused.json()["detail"]


@pytest.mark.parametrize("change, words", [
    ({"project": "nosuchproject"}, "training project 'nosuchproject' does not exist"),
    ({"baseModel": "optimize/tiny-qwen2.5"}, "is not selected on this deployment"),
    ({"baseModel": "google/gemma-4-26b-a4b-it"}, "allowed for serving only and cannot train"),
    ({"config": {"dataset": "nope/nothing", "method": "sft"}}, "dataset nope/nothing does not exist"),
    ({"config": {"dataset": "chat:train", "method": "dpo"}}, "holds chat rows; method dpo trains on preference pairs"),
    ({"config": {"dataset": "chat:train", "method": "grpo"}}, "a grpo run needs config.reward.terms"),
    ({"config": {"dataset": "chat:train", "method": "ppo"}}, "config.method: Input should be"),
    ({"config": {"dataset": "chat:train", "data": {"truncation": "right"}}}, "data.truncation: right would cut"),
    ({"config": {"dataset": "chat:train", "hyperparams": {"lora": {"adaptExperts": True}}}},
     "has no expert weights that lora.adaptExperts could adapt"),
])
def test_refusals_at_submission_name_what_to_change(completed_run, change, words):
    client = completed_run["client"]
    document = {**plan(completed_run["project"], "chat:train"), **change}
    before = client.get("/v1/training/runs").json()["runs"]
    refused = client.post("/v1/training/runs", json=document)
    assert refused.status_code in (400, 404, 422) and words in refused.json()["detail"], refused.json()
    assert refused.json().get("hint")
    assert client.get("/v1/training/runs").json()["runs"] == before  # nothing stored


def test_work_this_deployment_can_never_train_is_refused_at_submission(completed_run, capsys, tmp_path):
    cli = Cli(capsys, completed_run["url"])
    before = cli.json("training", "runs", "list")["runs"]
    for execution, words, hint in (
            ({"deviceProfile": "h200", "gpus": 1},
             "execution.deviceProfile 'h200' is not a device profile of this deployment; profiles here: cpu (1 device)",
             "set execution.deviceProfile to one of them"),
            ({"deviceProfile": "cpu", "gpus": 3},
             "execution.gpus 3 asks for more devices of profile 'cpu' than this deployment has (cpu (1 device))",
             "set execution.gpus to 1 or fewer")):
        path = write_plan(tmp_path, plan(completed_run["project"], "chat:train", execution=execution))
        for flags in ((), ("--dry-run",)):
            result = cli("training", "runs", "start", "-f", path, "--force", *flags)
            assert result.code == 1 and words in result.err and hint in result.err, result.err
    assert cli.json("training", "runs", "list")["runs"] == before  # nothing stored


def test_a_long_row_is_refused_before_a_device_then_at_submission(own_project, sqlite_server, capsys, tmp_path):
    cli = Cli(capsys, sqlite_server.url)
    project = own_project["project"]
    rows = [chat_row("short", "ok"), chat_row("long " * 400, "ok"), chat_row("longer " * 500, "ok")]
    cli.ok("registry", "datasets", "register", f"{project}/long", "-f",
           str(write_jsonl(tmp_path / "long.jsonl", rows)))
    path = write_plan(tmp_path, plan(project, "long"))
    run = cli.json("training", "runs", "start", "-f", path, "--force")
    assert run["lengthCheck"]["status"] == "waiting"  # no analysis yet: one is started, the run waits for it
    cli("training", "runs", "wait", run["runId"], "--timeout", "120")
    final = cli.json("training", "runs", "get", run["runId"])
    assert final["phase"] == "FAILED" and final["attempt"] == 0  # refused before it claimed a device
    reason = final["failureReason"]
    assert reason.startswith("the run is refused before it claims a device: 2 row(s) of ")
    assert f"{project}/long:v1 are longer than maxSeqLength 256: line 3 (" in reason  # longest first
    assert "), line 2 (" in reason and "measured by analysis" in reason and "under optimize/tiny-llama-3.2 at" in reason
    assert "set data.truncation: drop" in reason
    check = final["lengthCheck"]  # it says what the reason says: refused, by the analysis the reason names
    assert check["status"] == "refused" and check["datasets"][0]["overMaxSeqLength"] == 2
    assert f"measured by analysis {check['datasets'][0]['analysisId'][:12]}" in reason
    assert "refused the run" in cli.ok("training", "runs", "get", run["runId"]).out
    # the analysis is done now: the same plan is refused at submission, and nothing is stored
    before = cli.json("training", "runs", "list", "--project", project)["runs"]
    again = cli("training", "runs", "start", "-f", path, "--force")
    assert again.code == 1 and "2 row(s) of" in again.err and "line 3 (" in again.err
    assert cli.json("training", "runs", "list", "--project", project)["runs"] == before


def test_a_run_whose_check_did_not_run_refuses_a_long_row_when_it_reads_it(server_factory, tmp_path, capsys):
    proc = server_factory("nowait", env={"OPTIMIZE_ANALYSIS_WAIT_SECONDS": "0"})
    cli = Cli(capsys, proc.url)
    cli.ok("training", "base-models", "select", MODEL, "--from", str(built_standin(MODEL)))
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


def test_a_run_outside_every_measured_envelope_is_admitted_with_a_warning(own_project, sqlite_server, capsys,
                                                                         tmp_path):
    cli = Cli(capsys, sqlite_server.url)
    document = plan(own_project["project"], "chat")
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
    cli.ok("training", "base-models", "select", MODEL, "--from", str(built_standin(MODEL)))
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
def test_rows_the_template_renders_without_a_part_are_refused_under_every_truncation(own_project, sqlite_server,
                                                                                    capsys, tmp_path, truncation):
    from tests.row_cases import TOOLS

    cli = Cli(capsys, sqlite_server.url)
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "12"}'}}
    rows = [chat_row("hi", "hello"),
            {"messages": [{"role": "user", "content": "find 12"},
                          {"role": "assistant", "content": "checking", "tool_calls": [call]},
                          {"role": "tool", "tool_call_id": "c1", "content": "shipped"},
                          {"role": "assistant", "content": "It shipped."}], "tools": TOOLS}]
    name = f"{own_project['project']}/calls"
    cli.ok("registry", "datasets", "register", name, "-f", str(write_jsonl(tmp_path / "calls.jsonl", rows)))
    cli.ok("training", "datasets", "analyze", name, "--model", MODEL, "--wait")
    document = plan(own_project["project"], "calls")
    document["config"]["data"] = {"truncation": truncation}
    result = cli("training", "runs", "start", "-f", write_plan(tmp_path, document), "--force")
    assert result.code == 1
    assert (f"the chat template refuses or drops part of 1 row(s) of {name}:v1: line 2 (message 1: the chat "
            "template renders the message without its text)") in " ".join(result.err.split())


def test_a_comparison_scores_a_snapshot_beside_a_candidate_and_refuses_what_it_cannot_compare(trained, capsys):
    """On both stores: the run's last save (its registered model) beside the base model, on the validation set; the
    refusals name what to change and store nothing."""
    cli, project, run_id = Cli(capsys, trained["url"]), trained["project"], trained["run"]["runId"]
    last = cli.json("training", "runs", "snapshots", run_id)["snapshots"][-1]["snapshotId"]
    asked = ["--source", last[:12], "--dataset", f"{project}/valid", "--grader", "contains", "--max-new-tokens", "4"]
    done = json.loads(cli.ok("training", "comparisons", "create", *asked, "--candidate", MODEL, "--wait",
                             "-o", "json-compact").out.splitlines()[-1])
    assert done["phase"] == "COMPLETED" and done["result"] == "Complete", done
    assert [(e["model"], e["role"]) for e in done["entries"]] == [(f"{project}/tiny-llama-3.2:v1", "source"),
                                                                  (MODEL, "candidate")]
    assert done["source"] == {"snapshotId": last, "runId": run_id, "step": 16, "model": f"{project}/tiny-llama-3.2:v1"}
    assert sorted(s["model"] for s in done["scores"]) == sorted(e["model"] for e in done["entries"])
    assert all(s["rows"] == 8 for s in done["scores"]) and done["count"] == {"done": 2, "total": 2,
                                                                              "unit": "evaluations ended"}
    assert cli.json("training", "comparisons", "get", done["comparisonId"])["scores"] == done["scores"]
    assert [c["comparisonId"] for c in cli.json("training", "comparisons", "list", "--project", project,
                                                "--phase", "completed")["comparisons"]] == [done["comparisonId"]]
    ended = cli("training", "comparisons", "cancel", done["comparisonId"])
    assert ended.code == 1 and "is COMPLETED; there is nothing to cancel" in ended.err

    before = cli.json("training", "comparisons", "list", "--project", project)["comparisons"]
    for extra, words in ((["--branch", run_id], "every candidate named is the source snapshot's own model"),
                         (["--all-branches", run_id], f"run {run_id[:12]} has no branch from snapshot {last[:12]}"),
                         ([], "a comparison needs at least one candidate besides its source"),
                         (["--candidate", MODEL, "--promote", "v3"], "alias 'v3' looks like a version")):
        refused = cli("training", "comparisons", "create", *asked, *extra)
        assert refused.code == 1 and words in refused.err, refused.err
    unknown = cli("training", "comparisons", "create", "--source", "feedfacefeed", "--candidate", MODEL,
                  "--dataset", f"{project}/valid")
    assert unknown.code == 1 and "snapshot 'feedfacefeed' does not exist" in unknown.err, unknown.err
    assert cli.json("training", "comparisons", "list", "--project", project)["comparisons"] == before
    response = httpx.post(f"{trained['url']}/v1/training/comparisons", headers=headers_for(trained["url"]),
                          json={"source": last, "candidates": [MODEL], "dataset": "x/y", "margin": -1})
    assert response.status_code == 422 and "margin must be a number from 0 to 1000000" in response.json()["detail"]
