"""The dry run through the CLI and API: everything a submission checks, nothing started; the Lengths section
from the dataset analysis; bounded reading of a large sharded dataset with its coverage note."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest
import yaml

from tests.conftest import Cli, chat_row, from_standin, start_server, write_jsonl

pytestmark = pytest.mark.integration
MODEL = "optimize/tiny-llama-3.2"
READ_AT_MOST = 40


@pytest.fixture(scope="module")
def dry_server(tmp_path_factory):
    proc = start_server(tmp_path_factory.mktemp("dry-run"), env={"OPTIMIZE_DRY_RUN_MAX_EXAMPLES": str(READ_AT_MOST)})
    httpx.post(f"{proc.url}/v1/training/base-models/{MODEL}/select", headers=proc.headers, json=from_standin(MODEL),
               timeout=600).raise_for_status()
    yield proc
    proc.stop()


@pytest.fixture
def dcli(capsys, dry_server) -> Cli:
    return Cli(capsys, dry_server.url)


def conversation(turns: int, words: int = 40) -> dict:
    messages = [{"role": "system", "content": "You answer support tickets."}]
    for i in range(turns):
        messages += [{"role": "user", "content": f"Question {i}: " + "order refund " * words},
                     {"role": "assistant", "content": f"Answer {i}: shipped."}]
    return {"messages": messages}


def project_with(dcli: Cli, tmp_path, rows: list[dict], shard_size: str | None = None) -> str:
    project = f"dry{uuid.uuid4().hex[:8]}"
    args = ["registry", "datasets", "register", f"{project}/chat", "-f", str(write_jsonl(tmp_path / "c.jsonl", rows))]
    dcli.ok(*args, *(["--shard-size", shard_size] if shard_size else []))
    dcli.ok("training", "projects", "create", project)
    return project


def plan_file(tmp_path, project: str, max_seq: int = 1024, truncation: str = "error") -> str:
    path = tmp_path / f"{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump({
        "kind": "run", "project": project, "baseModel": MODEL,
        "config": {"dataset": "chat", "maxSeqLength": max_seq, "data": {"truncation": truncation},
                   "hyperparams": {"optimizer": {"learningRate": 0.001}}},
    }))
    return str(path)


def test_a_dry_run_starts_nothing_and_names_the_command_that_starts_an_analysis(dcli, tmp_path, dry_server):
    project = project_with(dcli, tmp_path, [chat_row(f"q{i}", f"a{i}") for i in range(5)])
    result = dcli.ok("training", "runs", "start", "-f", plan_file(tmp_path, project), "--dry-run")
    assert "Dry run: nothing was started" in result.out
    assert f"start one with: akka training datasets analyze {project}/chat:v1 --model {MODEL}" in result.out
    assert dcli.json("training", "runs", "list", "--project", project)["runs"] == []
    assert dcli.json("training", "datasets", "analyses", f"{project}/chat")["analyses"] == []  # none started
    body = httpx.post(f"{dry_server.url}/v1/training/runs", headers=dry_server.headers, params={"dryRun": "true"},
                      json=yaml.safe_load(open(plan_file(tmp_path, project)))).json()
    assert body["dryRun"] and body["resolved"]["lengths"][0]["status"] == "none"


def test_the_lengths_section_and_the_refusal_come_from_the_analysis(dcli, tmp_path):
    rows = [conversation(1), conversation(1, words=5), conversation(3), conversation(6)]
    project = project_with(dcli, tmp_path, rows)
    dcli.ok("training", "datasets", "analyze", f"{project}/chat", "--model", MODEL, "--wait")
    lengths = dcli.json("training", "runs", "start", "-f", plan_file(tmp_path, project, 2048), "--dry-run")
    [section] = lengths["resolved"]["lengths"]
    assert section["status"] == "done" and section["rows"] == 4 and section["overMaxSeqLength"] == 0
    assert section["tokenizer"]["repository"] == MODEL and section["chatTemplate"]["sha256"]
    limit = sorted([section["median"], section["longest"]])[0]  # the median row fits, the longest does not
    refused = dcli("training", "runs", "start", "-f", plan_file(tmp_path, project, limit), "--dry-run")
    assert refused.code == 1
    assert f"row(s) of {project}/chat:v1 are longer than maxSeqLength {limit}: line 4 (" in refused.err
    submitted = dcli("training", "runs", "start", "-f", plan_file(tmp_path, project, limit), "--force")
    assert submitted.code == 1 and refused.err.splitlines()[0] == submitted.err.splitlines()[0]  # the same words
    trimmed = dcli.ok("training", "runs", "start", "-f", plan_file(tmp_path, project, limit, "oldest_or_drop"),
                      "--dry-run").out
    assert "long row(s) trimmed;" in trimmed and "cannot fit even trimmed" in trimmed


def test_a_large_sharded_dataset_is_read_in_part_and_says_so_first(dcli, tmp_path):
    rows = [chat_row(f"question {i}", f"answer {i}") for i in range(300)]
    rows[1] = rows[0]  # a duplicate inside the part read (two rows of each shard read)
    project = project_with(dcli, tmp_path, rows, shard_size="1KiB")
    shards = dcli.json("registry", "datasets", "get", f"{project}/chat")["objects"]
    assert len(shards) > 16
    answer = dcli.json("training", "runs", "start", "-f", plan_file(tmp_path, project), "--dry-run")
    [diagnostics] = answer["diagnostics"]
    coverage = diagnostics["coverage"]
    assert coverage["total"] == 300 and not coverage["complete"] and coverage["read"] <= READ_AT_MOST
    assert f"(the first examples of 16 evenly spaced shards of {len(shards)})" in coverage["note"]
    assert "the unread rest may differ" in coverage["note"]
    assert diagnostics["duplicates"] == {"count": 1, "rows": [{"line": 2, "sameAs": 1}]}
    text = dcli.ok("training", "runs", "start", "-f", plan_file(tmp_path, project), "--dry-run").out
    note = text.index("note: the dry run read")
    assert note < text.index("duplicate(s)") < text.index("shapes:")


def test_show_resolved_names_each_source(dcli, tmp_path):
    project = project_with(dcli, tmp_path, [chat_row()])
    text = dcli.ok("training", "runs", "start", "-f", plan_file(tmp_path, project), "--dry-run", "--show-resolved").out
    assert "config.hyperparams.optimizer.learningRate = 0.001 (stated)" in text
    assert "config.hyperparams.lora.rank = 8 (default)" in text
    assert "config.model.gradientCheckpointing = False (default)" in text  # the cpu: no recomputation
    memory = next(line for line in text.splitlines() if line.startswith("Memory"))
    assert "GiB per device (weights " in memory and "gradient checkpointing off" in memory, memory
    bad = dcli("training", "runs", "start", "-f", plan_file(tmp_path, project), "--show-resolved")
    assert bad.code == 2 and "--show-resolved needs --dry-run" in bad.err
    assert json.loads(dcli.ok("training", "runs", "start", "-f", plan_file(tmp_path, project), "--dry-run", "-o",
                              "json").out)["resolved"]["sources"]["config.seed"] == "default"


def test_a_snake_case_key_is_refused_by_path_everywhere_a_plan_is_read(dcli, tmp_path, dry_server):
    project = project_with(dcli, tmp_path, [chat_row()])
    document = yaml.safe_load(open(plan_file(tmp_path, project)))
    document["config"]["hyperparams"]["training"] = {"max_steps": 3}
    path = tmp_path / "snake.yaml"
    path.write_text(yaml.safe_dump(document))
    words = "config.hyperparams.training.max_steps: unknown field (did you mean maxSteps?)"
    for extra in (["--dry-run"], ["--force"]):
        refused = dcli("training", "runs", "start", "-f", str(path), *extra)
        assert refused.code == 1 and words in refused.err and "each plan key has one spelling" in refused.err
        as_json = dcli("training", "runs", "start", "-f", str(path), *extra, "-o", "json")
        assert as_json.code == 1 and as_json.err == ""
        error = as_json.json["error"]
        assert words in error["message"] and (error["code"], error["status"]) == ("invalid", 422)
        assert error["hint"].endswith("each plan key has one spelling (max_steps is spelled maxSteps)")
    for params in ({}, {"dryRun": "true"}):
        answer = httpx.post(f"{dry_server.url}/v1/training/runs",
                            headers=dry_server.headers, params=params, json=document)
        assert answer.status_code == 422 and answer.headers["content-type"] == "application/problem+json"
        assert words in answer.json()["detail"] and "one spelling" in answer.json()["hint"]
    assert dcli.json("training", "runs", "list", "--project", project)["runs"] == []
    document["config"]["hyperparams"]["training"] = {"maxSteps": 3}
    path.write_text(yaml.safe_dump(document))
    resolved = dcli.json("training", "runs", "start", "-f", str(path), "--dry-run")["resolved"]
    assert resolved["config"]["hyperparams"]["training"]["maxSteps"] == 3
    assert resolved["sources"]["config.hyperparams.training.maxSteps"] == "stated"


def test_a_usage_error_in_json_modes_is_an_error_object(dcli, tmp_path):
    bad = dcli("training", "runs", "start", "-f", plan_file(tmp_path, "p"), "--show-resolved", "-o", "json")
    assert bad.code == 2 and bad.err == ""
    assert bad.json["error"]["code"] == "usage" and "--show-resolved needs --dry-run" in bad.json["error"]["message"]
    assert bad.json["error"]["hint"] == "see: akka training runs start --help"


def test_a_max_seq_length_beyond_the_base_models_context_is_refused_by_its_path(dcli, tmp_path):
    project = project_with(dcli, tmp_path, [chat_row("q", "a")])
    refused = dcli("training", "runs", "start", "-f", plan_file(tmp_path, project, max_seq=8192), "--dry-run")
    assert refused.code == 1
    assert f"config.maxSeqLength 8192 is beyond the 4096-token context of {MODEL}" in " ".join(refused.err.split())
    assert "set config.maxSeqLength to at most 4096" in refused.err
