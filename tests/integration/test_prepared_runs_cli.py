"""Supervised runs over prepared token rows, through the CLI against a real server and worker on the stand-in: the
capitals chat rows are rendered by the platform's own renderer into Parquet files of input_ids and loss_mask,
described and registered; a run over them and a run over the chat rows train to the same losses, update for
update. The dry run names the longest row from the version. Every refusal before a device names the dataset:
another tokenizer commit, another chat template, data.truncation oldest, a smoke check, a row longer than
maxSeqLength under error, a reinforcement run, and an evaluation."""

from __future__ import annotations

import json
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from optimize.chat.families import template_kwargs
from optimize.chat.render import ChatRenderer, LossPolicy, template_sha256
from tests.conftest import Cli, built_standin
from tests.run_fixtures import MODEL, capital_rows, capitals_project, plan, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def prepared(sqlite_server, tmp_path_factory):
    """The capitals project (its chat rows registered as NAME/chat) and the same rows prepared as NAME/prepared."""
    tmp = tmp_path_factory.mktemp("prepared-runs")
    project = capitals_project(sqlite_server.url, tmp, "pr", copies=2)
    entry = project["client"].get(f"/v1/training/base-models/{MODEL}").json()
    folder = tmp / "rows"
    renderer = ChatRenderer.from_pretrained(str(built_standin(MODEL)), template_kwargs(entry["family"]))
    rendered = [renderer.render(row, LossPolicy()) for row in capital_rows(2)]
    (folder / "data").mkdir(parents=True)
    pq.write_table(pa.table({"input_ids": [r.input_ids for r in rendered],
                             "loss_mask": [r.loss_mask for r in rendered]}), folder / "data" / "rows.parquet")
    template = template_sha256(renderer.tokenizer.chat_template)
    from optimize.cli.main import main

    commit = entry["selection"]["commit"]
    assert main(["registry", "datasets", "describe-prepared", str(folder), "--tokenizer", entry["repository"],
                 "--revision", commit, "--chat-template-sha256", template]) == 0
    name = project["name"]
    assert main(["registry", "datasets", "register", f"{name}/prepared", "-f", str(folder), "--server",
                 sqlite_server.url]) == 0
    return {**project, "url": sqlite_server.url, "folder": folder, "repository": entry["repository"],
            "commit": commit, "template": template, "longest": max(len(r.input_ids) for r in rendered)}


def run_plan(name: str, dataset: str, **config) -> dict:
    document = plan(name, dataset)
    document["config"] |= {"seed": 5, **config}
    document["config"]["hyperparams"]["training"]["maxSteps"] = 6
    return document


def write(tmp, document: dict) -> str:
    path = tmp / f"plan-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump(document))
    return str(path)


def losses(client, run_id: str) -> list[float]:
    return [m["loss"] for m in client.get(f"/v1/training/runs/{run_id}/metrics").json()["steps"]]


def test_prepared_rows_train_to_the_losses_of_the_same_rows_as_chat(prepared, capsys, tmp_path):
    cli, name, client = Cli(capsys, prepared["url"]), prepared["name"], prepared["client"]
    dry = cli.json("training", "runs", "start", "-f", write(tmp_path, run_plan(name, "prepared")), "--dry-run")
    [lengths] = dry["resolved"]["lengths"]
    assert lengths["status"] == "prepared" and lengths["longest"] == prepared["longest"]
    shown = cli.ok("training", "runs", "start", "-f", write(tmp_path, run_plan(name, "prepared")), "--dry-run").out
    assert f"prepared token rows: the longest is {prepared['longest']} tokens" in shown
    # prepared rows validate a run over chat rows too: each dataset's Lengths section as its form has it
    both = cli.json("training", "runs", "start", "-f", write(tmp_path, run_plan(name, "chat", validation={
        "dataset": "prepared"})), "--dry-run")
    assert [(s["role"], s["status"]) for s in both["resolved"]["lengths"]][1] == ("validation", "prepared")

    runs = {}
    for dataset in ("prepared", "chat"):
        started = cli.json("training", "runs", "start", "-f", write(tmp_path, run_plan(name, dataset)), "--force")
        runs[dataset] = started["runId"]
    for run_id in runs.values():
        done = wait_for(client, f"/v1/training/runs/{run_id}", lambda r: r["terminal"])
        assert done["phase"] == "COMPLETED", done["failureReason"]
    assert len(losses(client, runs["prepared"])) == 6
    assert losses(client, runs["prepared"]) == losses(client, runs["chat"])
    shown = cli.ok("training", "runs", "get", runs["prepared"]).out
    assert "the training dataset holds prepared token rows, which no analysis measures" in " ".join(shown.split())
    model = client.get(f"/v1/training/runs/{runs['prepared']}").json()["results"]["model"]
    assert model and client.get(f"/v1/training/runs/{runs['prepared']}").json()["dataset"]["reference"] == \
        f"{name}/prepared:v1"


def redescribed(prepared, tmp_path, **changes) -> str:
    """The same rows under another descriptor, registered as a dataset of their own."""
    import shutil

    folder = tmp_path / f"rows-{uuid.uuid4().hex[:6]}"
    shutil.copytree(prepared["folder"], folder)
    descriptor = json.loads((folder / "prepared.json").read_text())
    descriptor["tokenizer"] |= changes.get("tokenizer", {})
    descriptor["chatTemplateSha256"] = changes.get("template", descriptor["chatTemplateSha256"])
    (folder / "prepared.json").write_text(json.dumps(descriptor))
    dataset = f"other{uuid.uuid4().hex[:6]}"
    from optimize.cli.main import main

    assert main(["registry", "datasets", "register", f"{prepared['name']}/{dataset}", "-f", str(folder),
                 "--server", prepared["url"]]) == 0
    return dataset


@pytest.mark.parametrize("change, words", [
    (lambda p, tmp: run_plan(p["name"], redescribed(p, tmp, tokenizer={"revision": "c" * 40})),
     "was tokenised with {repository} at cccccccccccc; this run trains"),
    (lambda p, tmp: run_plan(p["name"], redescribed(p, tmp, template="d" * 64)),
     "was rendered under the chat template sha256 dddddddddddd"),
    (lambda p, tmp: run_plan(p["name"], "prepared", data={"truncation": "oldest"}),
     "data.truncation: oldest removes whole turns, and config.dataset {name}/prepared:v1 holds prepared token rows"),
    (lambda p, tmp: run_plan(p["name"], "prepared", smoke={"rows": 2}),
     "a smoke check renders and answers chat rows"),
    (lambda p, tmp: run_plan(p["name"], "prepared", maxSeqLength=32),
     "holds a row of {longest} tokens, longer than maxSeqLength 32"),
    (lambda p, tmp: {**run_plan(p["name"], "prepared"), "config": {"dataset": "prepared", "method": "grpo"}},
     "config.dataset {name}/prepared:v1 holds prepared token rows; method grpo trains on chat rows"),
])
def test_a_run_the_rows_cannot_be_trained_by_is_refused_before_a_device_naming_the_dataset(prepared, capsys,
                                                                                            tmp_path, change, words):
    cli = Cli(capsys, prepared["url"])
    refused = cli("training", "runs", "start", "-f", write(tmp_path, change(prepared, tmp_path)), "--dry-run")
    expected = words.format(repository=prepared["repository"], name=prepared["name"], longest=prepared["longest"])
    assert refused.code == 1 and expected in " ".join(refused.err.split()), refused.err


def test_an_evaluation_and_an_analysis_refuse_prepared_rows_and_the_row_viewer_shows_their_tokens(prepared, capsys):
    cli, name = Cli(capsys, prepared["url"]), prepared["name"]
    refused = cli("training", "evaluations", "start", "--model", MODEL, "--dataset", f"{name}/prepared",
                  "--project", name)
    assert refused.code == 1 and "holds prepared token rows; an evaluation reads chat rows" in refused.err, \
        refused.err
    analysis = cli("training", "datasets", "analyze", f"{name}/prepared", "--model", MODEL)
    assert analysis.code == 1 and "holds prepared token rows, which need no analysis" in analysis.err, analysis.err
    page = prepared["client"].get(f"/v1/registry/datasets/{name}/prepared/versions/v1/rows",
                                  params={"offset": 1, "limit": 2}).json()
    assert [item["line"] for item in page["items"]] == [2, 3] and page["rows"] == 16
    first = page["items"][0]["row"]
    assert set(first) == {"input_ids", "loss_mask"} and len(first["input_ids"]) == len(first["loss_mask"])
