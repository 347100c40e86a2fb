"""Pipelines through the CLI against a real server and workers on the stand-in: a train stage and an evaluate stage
naming its model as `@train`, checked by a dry run first; the stages run one after another, the run linked to its
pipeline; a gate below its score stops the pipeline FAILED with the later stages skipped; a stage whose run was
cancelled fails the pipeline, and `resume` starts that stage again as a new run and completes; plans whose
`@STAGE` names a later or unknown stage, or an output that does not fit, are refused at submission, nothing
started."""

from __future__ import annotations

import copy
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from tests.conftest import Cli
from tests.run_fixtures import MODEL, capitals_project, followed, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def project(sqlite_server, tmp_path_factory):
    return capitals_project(sqlite_server.url, tmp_path_factory.mktemp("pipelines"), "pl", copies=1)


def pipeline_plan(name: str, gate: float | None = None, then_train: bool = False) -> dict:
    evaluate = {"name": "check", "type": "evaluate", "model": "@train", "dataset": f"{name}/chat",
                "grader": "contains", "maxNewTokens": 4}
    if gate is not None:
        evaluate["minMeanScore"] = gate
    stages = [{"name": "train", "type": "train", "baseModel": MODEL, "modelName": "piped",
               "config": {"dataset": f"{name}/chat", "maxSeqLength": 256,
                          "hyperparams": {"optimizer": {"learningRate": 0.01},
                                          "training": {"maxSteps": 4, "batchSize": 4}}},
               "execution": {"deviceProfile": "cpu", "saveEvery": 2}},
              evaluate]
    if then_train:
        stages.append({**copy.deepcopy(stages[0]), "name": "more", "source": {"model": "@train"}})
    return {"kind": "pipeline", "project": name, "stages": stages}


def write(tmp_path, document: dict) -> str:
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(document))
    return str(path)


def test_a_train_stage_then_its_evaluation_run_in_order_linked_to_the_pipeline(project, sqlite_server, capsys,
                                                                             tmp_path):
    cli, name, client = Cli(capsys, sqlite_server.url), project["name"], project["client"]
    plan = write(tmp_path, pipeline_plan(name, gate=0.0))
    dry = cli.json("training", "pipelines", "start", "-f", plan, "--dry-run")
    assert dry["dryRun"] and [(s["name"], s["checked"]) for s in dry["stages"]] == [
        ("train", "its run's dry run"), ("check", "its references (the rest when it starts)")]
    assert dry["stages"][1]["reads"] == {"model": "@train"}
    assert cli.json("training", "pipelines", "list", "--project", name)["pipelines"] == []  # nothing started

    done = followed(cli, "training", "pipelines", "start", "-f", plan, "--wait", "--exit-status")
    assert done["phase"] == "COMPLETED", done
    train, check = done["stages"]
    assert (train["state"], train["jobKind"], train["output"]) == ("completed", "run", f"{name}/piped:v1")
    assert (check["state"], check["jobKind"], check["minMeanScore"]) == ("completed", "evaluation", 0)
    assert check["meanScore"] is not None and train["deviceSeconds"] > 0
    assert done["count"] == {"done": 2, "total": 2, "unit": "stages completed"}
    run = client.get(f"/v1/training/runs/{train['jobId']}").json()
    assert run["pipeline"] == {"pipelineId": done["pipelineId"], "stage": "train"}
    evaluation = client.get(f"/v1/training/evaluations/{check['jobId']}").json()
    assert evaluation["model"] == f"{name}/piped:v1" and evaluation["grader"] == "contains"
    listed = cli.ok("training", "runs", "list", "--project", name).out
    assert f"pipeline {done['pipelineId'][:12]} stage train" in listed
    text = cli.ok("training", "pipelines", "get", done["pipelineId"][:10]).out
    assert "train" in text and f"{name}/piped:v1" in text and "(gate 0)" in text


def test_a_gate_below_its_score_stops_the_pipeline_and_skips_the_later_stages(project, sqlite_server, capsys,
                                                                            tmp_path):
    cli, name = Cli(capsys, sqlite_server.url), project["name"]
    plan = write(tmp_path, pipeline_plan(name, gate=1.0, then_train=True))
    ended = followed(cli, "training", "pipelines", "start", "-f", plan, "--wait")
    check = ended["stages"][1]
    assert ended["phase"] == "FAILED" and check["state"] == "completed" and check["meanScore"] < 1.0, ended
    assert ended["failureReason"].startswith("stage check: mean score ")
    assert ended["failureReason"].endswith("is below its minMeanScore 1; the stages after it were not started")
    assert ended["stages"][2]["state"] == "skipped" and ended["stages"][2]["jobId"] is None
    refused = cli("training", "pipelines", "resume", ended["pipelineId"])
    assert refused.code == 1 and "was stopped by its gate" in refused.err
    failing = cli("training", "pipelines", "wait", ended["pipelineId"], "--exit-status")
    assert failing.code == 1


def test_a_stage_whose_run_ended_fails_the_pipeline_and_resume_starts_it_again(project, sqlite_server, capsys,
                                                                              tmp_path):
    cli, name, client = Cli(capsys, sqlite_server.url), project["name"], project["client"]
    started = cli.json("training", "pipelines", "start", "-f", write(tmp_path, pipeline_plan(name)))
    pipeline_id = started["pipelineId"]
    first = wait_for(client, f"/v1/training/pipelines/{pipeline_id}", lambda p: p["stages"][0]["jobId"])
    run_id = first["stages"][0]["jobId"]
    cli.ok("training", "runs", "cancel", run_id, "--force")
    failed = wait_for(client, f"/v1/training/pipelines/{pipeline_id}", lambda p: p["terminal"])
    assert failed["phase"] == "FAILED" and failed["failureReason"].startswith(f"stage train: run {run_id[:12]} "
                                                                              "ended CANCELLED")
    assert failed["stages"][0]["state"] == "cancelled" and failed["stages"][1]["state"] == "skipped"
    resumed = cli.json("training", "pipelines", "resume", pipeline_id)
    assert resumed["phase"] == "RUNNING"
    done = followed(cli, "training", "pipelines", "wait", pipeline_id)
    assert done["phase"] == "COMPLETED", done
    assert done["stages"][0]["attempt"] == 2 and done["stages"][0]["jobId"] != run_id
    listed = [p["pipelineId"] for p in cli.json("training", "pipelines", "list", "--project", name,
                                                "--phase", "completed")["pipelines"]]
    assert pipeline_id in listed


def mixing(d: dict, listed: list[str], into: str | None = "mixed") -> None:
    d["stages"][0]["config"]["dataset"] = listed
    if into:
        d["stages"][0]["mixedDataset"] = into


def more(d: dict, **config) -> dict:
    """A stage training on from the first stage's model."""
    return {"name": "more", "type": "train", "baseModel": MODEL, "source": {"model": "@train"},
            "config": {"dataset": f"{d['project']}/chat", **config}}


@pytest.mark.parametrize("change, words", [
    (lambda d: mixing(d, [f"{d['project']}/chat", "x/y"], None), "stage 1 (train): config.dataset lists 2 "
                                                                  "datasets; name mixedDataset (NS/NAME)"),
    (lambda d: d["stages"][0].update(mixedDataset="mixed"), "stage 1 (train): mixedDataset is where the datasets "
                                                            "config.dataset lists register together"),
    (lambda d: mixing(d, ["@check", f"{d['project']}/chat"]), "stage 1 (train): config.dataset[0] names @check, "
                                                              "which is not an earlier stage"),
    (lambda d: mixing(d, [f"{d['project']}/chat", f"{d['project']}/chat"]), "config.dataset lists a dataset twice"),
    (lambda d: mixing(d, [f"{d['project']}/chat", f"{d['project']}/absent"]), "stage train: "),
    (lambda d: d["stages"].append(more(d, hyperparams={"lora": {"rank": 8}})),
     "stage more: config.hyperparams.lora is stated, but a run from source.model @train trains that adapter"),
    (lambda d: d["stages"].append(more(d, hyperparms={})), "stage more: "),
    (lambda d: d["stages"][1].update(model="@later"), "stage 2 (check): model names @later, which is not an earlier "
                                                       "stage"),
    (lambda d: d["stages"].reverse(), "stage 1 (check): model names @train, which is not an earlier stage"),
    (lambda d: d["stages"].append({"name": "again", "type": "evaluate", "model": "@train", "dataset": "@check"}),
     "stage 3 (again): dataset takes a dataset, and @check is an evaluate stage, which gives nothing a later "
     "stage can"),
    (lambda d: d["stages"][1].update(name="train"), "stage 2 (train): the name 'train' is already stage 1's"),
    (lambda d: d["stages"][0].update(baseModel="no/such-model"), "stage train: "),
    (lambda d: d["stages"].append({"name": "tune", "type": "tune"}), "stage 3 (tune): type must be one of "
                                                                     "curate, distill, train, evaluate"),
    (lambda d: d["stages"].insert(0, {"name": "judge", "type": "curate", "judge": "@train", "dataset": "x/y"}),
     "stage 1 (judge): judge names @train, which is not an earlier stage"),
])
def test_bad_plans_are_refused_at_submission_naming_the_stage(project, sqlite_server, capsys, tmp_path, change,
                                                             words):
    cli, name = Cli(capsys, sqlite_server.url), project["name"]
    document = pipeline_plan(name)
    change(document)
    before = cli.json("training", "pipelines", "list", "--project", name)["pipelines"]
    refused = cli("training", "pipelines", "start", "-f", write(tmp_path, document))
    assert refused.code == 1 and words in refused.err, refused.err
    assert cli.json("training", "pipelines", "list", "--project", name)["pipelines"] == before


def test_a_mixing_stage_is_checked_at_submission_and_its_run_when_it_starts(project, sqlite_server, capsys, tmp_path):
    cli, name = Cli(capsys, sqlite_server.url), project["name"]
    document = pipeline_plan(name)
    mixing(document, [f"{name}/chat", f"{name}/chat:latest"])
    dry = cli.json("training", "pipelines", "start", "-f", write(tmp_path, document), "--dry-run")
    assert dry["stages"][0]["mixedDataset"] == f"{name}/mixed"
    assert dry["stages"][0]["checked"].startswith("its datasets and where they mix")

    # prepared token rows are files of their own, joined with no other rows
    folder = tmp_path / "prepared"
    folder.mkdir()
    pq.write_table(pa.table({"input_ids": [[1, 2, 3]], "loss_mask": [[0, 1, 1]]}), folder / "rows.parquet")
    (folder / "prepared.json").write_text(json.dumps({"tokenizer": {"repository": "r", "revision": "a" * 40},
                                                      "chatTemplateSha256": "b" * 64, "files": ["rows.parquet"]}))
    cli.ok("registry", "datasets", "register", f"{name}/tokens", "-f", str(folder))
    mixing(document, [f"{name}/chat", f"{name}/tokens"])
    refused = cli("training", "pipelines", "start", "-f", write(tmp_path, document))
    assert refused.code == 1 and f"stage train: config.dataset[1] {name}/tokens:v1 holds prepared token rows, which " \
                                 "a mix cannot join" in refused.err, refused.err


def test_a_stage_registering_into_an_archived_namespace_is_refused_at_submission(project, sqlite_server, capsys,
                                                                                tmp_path):
    """A distill stage's `to` and a train stage's `mixedDataset` alike."""
    cli, name = Cli(capsys, sqlite_server.url), project["name"]
    closed = f"closed{name}"
    rows = tmp_path / "r.jsonl"
    rows.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"},
                                             {"role": "assistant", "content": "hello"}]}) + "\n")
    cli.ok("registry", "datasets", "register", f"{closed}/kept", "-f", str(rows))
    cli.ok("registry", "namespaces", "archive", closed)
    distilling = pipeline_plan(name)
    distilling["stages"].insert(0, {"name": "distil", "type": "distill", "teacher": MODEL, "from": f"{name}/chat",
                                    "to": f"{closed}/answers"})
    mixed = pipeline_plan(name)
    mixing(mixed, [f"{name}/chat", f"{closed}/kept"], f"{closed}/mixed")
    before = cli.json("training", "pipelines", "list", "--project", name)["pipelines"]
    for document, stage in ((distilling, "distil"), (mixed, "train")):
        refused = cli("training", "pipelines", "start", "-f", write(tmp_path, document))
        assert refused.code == 1 and f"stage {stage}: namespace '{closed}' is archived" in refused.err, refused.err
    assert cli.json("training", "pipelines", "list", "--project", name)["pipelines"] == before
