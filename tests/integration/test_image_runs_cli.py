"""Rows with images on the SmolVLM stand-in, through the CLI against a real server and worker: a dataset of pages
(PNG images in the user messages) is analysed with each image's tokens counted as the model's processor counts
them, a supervised run trains on it on the cpu (LoRA on the language model, the vision tower frozen), the trained
model is evaluated on the pages, and an endpoint of it answers a chat request with an image (a data URL). Every
refusal before a device names the dataset, on SQLite and PostgreSQL: a model that reads no images, a method that
trains text only, rows that offer tools, data.truncation oldest / oldest_or_drop / right, a smoke check, and a row
longer than maxSeqLength under error once an analysis measured it. A dpo run trains pairs whose prompts hold
images."""

from __future__ import annotations

import base64
import json
import time
import uuid
from pathlib import Path

import httpx
import pytest
import yaml
from PIL import Image

from optimize.chat.families import content_as_parts
from optimize.chat.render import ChatRenderer, LossPolicy
from tests.conftest import Cli, built_standin, from_standin, headers_for, write_jsonl
from tests.run_fixtures import wait_for

pytestmark = pytest.mark.integration

VLM = "optimize/tiny-smolvlm"
COLOURS = {"red": (220, 20, 20), "green": (20, 200, 40), "blue": (20, 40, 220), "yellow": (230, 220, 20)}


def pages(folder: Path, copies: int = 2) -> list[dict]:
    """Rows asking the colour of a page, each page an image of that colour and its own size."""
    rows = []
    for index, (name, rgb) in enumerate(COLOURS.items()):
        path = folder / "images" / f"{name}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (40 + 12 * index, 30 + 9 * index), rgb).save(path, format="PNG")
        rows.append({"messages": [
            {"role": "user", "content": [{"type": "image", "path": f"images/{name}.png"},
                                         {"type": "text", "text": "What colour is this page?"}]},
            {"role": "assistant", "content": f"The page is {name}."}]})
    return rows * copies


def project_with_pages(url: str, tmp: Path, prefix: str) -> dict:
    name = f"{prefix}{uuid.uuid4().hex[:8]}"
    client = httpx.Client(base_url=url, headers=headers_for(url), timeout=600)
    client.post(f"/v1/training/base-models/{VLM}/select", json=from_standin(VLM)).raise_for_status()
    client.post("/v1/training/projects", json={"name": name}).raise_for_status()
    from optimize.cli.main import main

    rows = pages(tmp)
    assert main(["registry", "datasets", "register", f"{name}/pages", "-f", str(write_jsonl(tmp / "rows.jsonl", rows)),
                 "--server", url]) == 0
    return {"name": name, "client": client, "rows": rows, "tmp": tmp}


def image_plan(name: str, **config) -> dict:
    return {"kind": "run", "project": name, "baseModel": VLM,
            "config": {"dataset": "pages", "maxSeqLength": 256, "seed": 3,
                       "hyperparams": {"optimizer": {"learningRate": 0.02},
                                       "training": {"maxSteps": 6, "batchSize": 4}}, **config},
            "execution": {"deviceProfile": "cpu", "saveEvery": 6}}


def write(tmp: Path, document: dict) -> str:
    path = tmp / f"plan-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump(document))
    return str(path)


def lengths_here(rows: list[dict], folder: Path) -> list[int]:
    """Each row's length as the platform's renderer counts it here, with its images' tokens."""
    renderer = ChatRenderer.from_pretrained(str(built_standin(VLM)), parts=content_as_parts("smolvlm"))
    resolved = [{"messages": [{**m, "content": [{**p, "file": str(folder / p["path"])} if p.get("type") == "image"
                                                 else p for p in m["content"]]} if isinstance(m["content"], list)
                              else m for m in row["messages"]]} for row in rows]
    return [len(renderer.render(row, LossPolicy()).input_ids) for row in resolved]


@pytest.fixture(scope="module")
def image_project(sqlite_server, tmp_path_factory):
    return project_with_pages(sqlite_server.url, tmp_path_factory.mktemp("image-runs"), "img")


def test_an_image_dataset_is_analysed_with_its_image_tokens_counted_and_trains_a_supervised_run(
        image_project, sqlite_server, capsys):
    cli, name, tmp = Cli(capsys, sqlite_server.url), image_project["name"], image_project["tmp"]
    expected = lengths_here(image_project["rows"], tmp)
    text_only = lengths_here([{"messages": [{"role": "user", "content": "What colour is this page?"},
                                            {"role": "assistant", "content": "The page is red."}]}], tmp)[0]
    assert min(expected) > text_only + 20  # each image is dozens of tokens

    analysis = cli.json("training", "datasets", "analyze", f"{name}/pages", "--model", VLM, "--wait")
    assert analysis["phase"] == "done", analysis["reason"]
    assert analysis["report"]["lengths"]["max"] == max(expected), analysis["report"]["lengths"]

    run_file = write(tmp, image_plan(name))
    dry = cli.json("training", "runs", "start", "-f", run_file, "--dry-run")
    [lengths] = dry["resolved"]["lengths"]
    assert lengths["longest"] == max(expected), lengths
    started = cli.json("training", "runs", "start", "-f", run_file, "--force")
    run = wait_for(image_project["client"], f"/v1/training/runs/{started['runId']}", lambda r: r["terminal"],
                   timeout=600)
    assert run["phase"] == "COMPLETED", run["failureReason"]
    loss = run["results"]["trainingLoss"]
    assert run["results"]["steps"] == 6 and loss["end"] < loss["start"], loss
    model = run["results"]["model"]

    evaluation = cli("training", "evaluations", "start", "--model", model, "--dataset", f"{name}/pages",
                     "--grader", "contains", "--max-new-tokens", "4", "--wait", "--exit-status", "-o", "json")
    assert evaluation.code == 0, evaluation.err
    evaluated = image_project["client"].get(f"/v1/training/evaluations/{json.loads(evaluation.out)['evaluationId']}"
                                            ).json()
    assert evaluated["phase"] == "COMPLETED" and evaluated["progress"]["answered"] == 8, evaluated

    endpoint = cli.json("training", "endpoints", "create", "--model", model)["endpointId"]
    try:
        deadline = time.monotonic() + 300
        while not (state := cli.json("training", "endpoints", "get", endpoint[:12]))["settled"]:
            assert time.monotonic() < deadline, state
            time.sleep(0.2)
        assert state["phase"] == "READY", state
        red = base64.b64encode((tmp / "images" / "red.png").read_bytes()).decode()
        asked = {"model": model, "max_tokens": 4, "temperature": 0, "logprobs": True, "messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{red}"}},
                                         {"type": "text", "text": "What colour is this page?"}]}]}
        answer = image_project["client"].post("/v1/chat/completions", json=asked)
        assert answer.status_code == 200, answer.text
        assert answer.json()["usage"]["prompt_tokens"] > text_only  # the image's tokens were read
        fetched = image_project["client"].post("/v1/chat/completions", json={**asked, "messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}]})
        assert fetched.status_code == 400 and "it fetches no URL" in fetched.text, fetched.text
    finally:
        cli.ok("training", "endpoints", "delete", endpoint[:12])


def test_a_dpo_run_trains_pairs_whose_prompts_hold_images(image_project, sqlite_server, capsys):
    cli, name, tmp = Cli(capsys, sqlite_server.url), image_project["name"], image_project["tmp"]
    colours = list(COLOURS)
    pairs = [{"prompt": row["messages"][:1], "chosen": row["messages"][1],
              "rejected": {"role": "assistant", "content": f"The page is {colours[(i + 1) % len(colours)]}."}}
             for i, row in enumerate(image_project["rows"][:len(colours)])]
    cli.ok("registry", "datasets", "register", f"{name}/prefs", "-f", str(write_jsonl(tmp / "prefs.jsonl", pairs)))
    document = image_plan(name, dataset="prefs", method="dpo")
    document["config"]["hyperparams"]["training"] |= {"maxSteps": 2, "batchSize": 2}
    started = cli.json("training", "runs", "start", "-f", write(tmp, document), "--force")
    run = wait_for(image_project["client"], f"/v1/training/runs/{started['runId']}", lambda r: r["terminal"],
                   timeout=600)
    assert run["phase"] == "COMPLETED", run["failureReason"]
    assert run["results"]["steps"] == 2 and run["results"]["preference"]["accuracy"] is not None, run["results"]


GRPO = {"method": "grpo", "rlHyperparams": {"maxCompletionLength": 4, "training": {"maxSteps": 2, "batchSize": 2}},
        "reward": {"terms": [{"kind": "regex", "pattern": "red", "name": "red"}]}}
REFUSALS = [  # (what the plan changes, the words of the refusal)
    ({"baseModel": "optimize/tiny-llama-3.2"}, "and base model optimize/tiny-llama-3.2 reads no images"),
    ({"config": GRPO}, "; a grpo run trains on text rows only"),
    ({"config": {"dataset": "pagestools"}}, "row(s) that offer tools, and config.dataset"),
    ({"config": {"validation": {"dataset": "pagestools"}}}, "the trl engine renders no row's tools"),
    ({"config": {"data": {"truncation": "oldest"}}}, "data.truncation: oldest removes whole turns, and config.dataset"),
    ({"config": {"data": {"truncation": "oldest_or_drop"}}}, "data.truncation: oldest_or_drop removes whole turns"),
    ({"config": {"data": {"truncation": "right"}, "loss": {"explicitLossMaskColumn": "mask"}}},
     "data.truncation: right cuts a row's last tokens"),
    ({"config": {"smoke": {"rows": 2}}}, "a smoke check answers text prompts, and config.dataset"),
]


def test_runs_over_rows_with_images_are_refused_before_a_device_naming_the_dataset(server, tmp_path, capsys):
    project = project_with_pages(server.url, tmp_path, "imr")
    cli, name = Cli(capsys, server.url), project["name"]
    project["client"].post("/v1/training/base-models/optimize/tiny-llama-3.2/select",
                           json=from_standin("optimize/tiny-llama-3.2")).raise_for_status()
    offering = [{**row, "tools": [{"type": "function", "function": {"name": "zoom", "parameters": {
        "type": "object", "properties": {}}}}]} for row in project["rows"][:2]]
    cli.ok("registry", "datasets", "register", f"{name}/pagestools", "-f",
           str(write_jsonl(tmp_path / "tools.jsonl", project["rows"] + offering)))
    for changes, words in REFUSALS:
        document = image_plan(name)
        document |= {key: value for key, value in changes.items() if key != "config"}
        document["config"] |= changes.get("config", {})
        if "rlHyperparams" in document["config"]:
            del document["config"]["hyperparams"]
        refused = cli("training", "runs", "start", "-f", write(tmp_path, document), "--dry-run")
        said = " ".join(refused.err.split())
        assert refused.code == 1 and words in said and "holds rows with images" in said, (changes, refused.err)
    # an analysis or an evaluation of a model that reads no images
    llama = "optimize/tiny-llama-3.2"
    for args in (("training", "datasets", "analyze", f"{name}/pages", "--model", llama),
                 ("training", "evaluations", "start", "--model", llama, "--dataset", f"{name}/pages", "--project",
                  name)):
        refused = cli(*args)
        said = " ".join(refused.err.split())
        assert refused.code == 1 and f"and base model {llama} reads no images" in said, (args, refused.err)
    # under data.truncation: error, a row longer than maxSeqLength with its images' tokens, once measured
    cli.json("training", "datasets", "analyze", f"{name}/pages", "--model", VLM, "--wait")
    longest = max(lengths_here(project["rows"], tmp_path))
    refused = cli("training", "runs", "start", "-f", write(tmp_path, image_plan(name, maxSeqLength=longest - 1)),
                  "--dry-run")
    said = " ".join(refused.err.split())
    assert refused.code == 1 and f"{longest} tokens" in said and f"maxSeqLength {longest - 1}" in said, refused.err
