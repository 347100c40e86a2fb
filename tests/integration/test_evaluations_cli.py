"""Evaluations through the CLI and the API against a real server, real workers and real generation on CPU: the
stand-in base and the adapter a run trained on a small labelling task, scored with json-label-match; the trained
adapter scores higher than its base, and every answer says what it was answered from."""

from __future__ import annotations

import json
import time
import uuid

import httpx
import pytest

from tests.conftest import Cli, chat_row, from_standin, write_jsonl
from tests.run_fixtures import MODEL, followed, write_plan

pytestmark = pytest.mark.integration
TICKETS = [("my invoice is wrong", "billing"), ("I was charged twice", "billing"), ("refund my payment", "billing"),
           ("the parcel never arrived", "shipping"), ("where is my package", "shipping"),
           ("the box came damaged", "shipping")]


@pytest.fixture(scope="module")
def labelled(sqlite_server, tmp_path_factory):
    """A labelling dataset and an adapter trained on it."""
    tmp = tmp_path_factory.mktemp("evaluations")
    name = f"ev{uuid.uuid4().hex[:8]}"
    client = httpx.Client(base_url=sqlite_server.url, headers=sqlite_server.headers, timeout=600)
    client.post(f"/v1/training/base-models/{MODEL}/select", json=from_standin(MODEL)).raise_for_status()
    rows = [chat_row(f"Label this ticket: {text}", json.dumps({"label": label})) for text, label in TICKETS] * 4
    from optimize.cli.main import main

    assert main(["registry", "datasets", "register", f"{name}/tickets", "-f", str(write_jsonl(tmp / "t.jsonl", rows)),
                 "--server", sqlite_server.url]) == 0
    assert main(["registry", "datasets", "register", f"{name}/tools", "-f", str(write_jsonl(tmp / "c.jsonl", [
        {"messages": [{"role": "user", "content": "weather?"},
                      {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {
                          "name": "weather", "arguments": {"city": "Paris"}}}]}],
         "tools": [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]}])),
                 "--server", sqlite_server.url]) == 0
    client.post("/v1/training/projects", json={"name": name}).raise_for_status()
    document = {"kind": "run", "project": name, "baseModel": MODEL, "modelName": "labeller",
                "config": {"dataset": "tickets", "maxSeqLength": 128,
                           "hyperparams": {"optimizer": {"learningRate": 0.02},
                                           "training": {"maxSteps": 60, "batchSize": 8}}},
                "execution": {"deviceProfile": "cpu"}}
    cli_main = ["training", "runs", "start", "-f", write_plan(tmp, document), "--force", "--wait", "--server",
                sqlite_server.url]
    assert main(cli_main) == 0
    model = client.get("/v1/training/runs", params={"project": name}).json()["runs"][0]["results"]["model"]
    return {"name": name, "client": client, "model": model}


def test_the_trained_adapter_scores_higher_than_its_base(labelled, sqlite_server, capsys):
    cli = Cli(capsys, sqlite_server.url)
    base = followed(cli, "training", "evaluations", "start", "--model", MODEL, "--dataset",
                    f"{labelled['name']}/tickets", "--project", labelled["name"], "--max-new-tokens", "12", "--wait")
    trained = followed(cli, "training", "evaluations", "start", "--model", labelled["model"], "--dataset",
                       f"{labelled['name']}/tickets", "--max-new-tokens", "12", "--wait", "--exit-status")
    assert base["phase"] == "COMPLETED" and trained["phase"] == "COMPLETED", trained["failureReason"]
    assert trained["project"] == labelled["name"]  # a registered model's own project
    assert trained["report"]["meanScore"] > base["report"]["meanScore"], (base["report"], trained["report"])
    assert trained["report"]["scored"] == 24 and trained["report"]["perFieldAccuracy"][0]["field"] == "label"

    answers = cli.json("training", "evaluations", "predictions", trained["evaluationId"], "--limit", "5")
    assert len(answers["predictions"]) == 5
    for p in answers["predictions"]:
        assert p["chatTemplateSha256"].startswith("sha256:") or len(p["chatTemplateSha256"]) >= 64
        assert p["baseModelRevision"] == trained["baseModel"]["commit"]
        assert p["prompt"].count("<|begin_of_text|>") <= 1  # one beginning-of-sequence token
    text = cli.ok("training", "evaluations", "get", trained["evaluationId"][:10]).out
    assert "Mean score" in text and "label" in text
    listed = cli.json("training", "evaluations", "list", "--project", labelled["name"])["evaluations"]
    assert {e["evaluationId"] for e in listed} >= {base["evaluationId"], trained["evaluationId"]}
    assert cli.json("training", "evaluations", "list", "--model", labelled["model"])["evaluations"][0][
        "evaluationId"] == trained["evaluationId"]

    table = cli.json("training", "projects", "scores", labelled["name"])
    assert table["dataset"] == f"{labelled['name']}/tickets:v1" and table["grader"] == "json-label-match"
    [group] = table["groups"]
    assert group["baseline"]["evaluationId"] == base["evaluationId"]
    [column] = group["columns"]
    assert column["configuration"].startswith("labeller ") and column["meanScore"] == trained["report"]["meanScore"]
    text = cli.ok("training", "projects", "scores", labelled["name"]).out
    assert "baseline" in text and "labeller" in text


def test_an_evaluation_held_to_a_response_schema_answers_json_of_it_every_time(labelled, sqlite_server, capsys,
                                                                                tmp_path):
    """--response-schema: the base model, which writes no JSON of its own, answers every row with JSON of the
    schema (its label one of the schema's), sampled at temperature 1; a schema that cannot be compiled is refused."""
    schema = {"type": "object", "properties": {"label": {"enum": ["billing", "shipping"]}}, "required": ["label"],
              "additionalProperties": False}
    (tmp_path / "schema.json").write_text(json.dumps(schema))
    cli = Cli(capsys, sqlite_server.url)
    sampled = followed(cli, "training", "evaluations", "start", "--model", MODEL, "--dataset",
                       f"{labelled['name']}/tickets", "--project", labelled["name"], "--max-new-tokens", "40",
                       "--response-schema", str(tmp_path / "schema.json"), "--generations", "4", "--temperature", "1",
                       "--rows", "6", "--wait", "--exit-status")
    answers = cli.json("training", "evaluations", "predictions", sampled["evaluationId"], "--limit", "10")
    assert len(answers["predictions"]) == 6
    for prediction in answers["predictions"]:
        for sample in prediction["samples"]:
            assert json.loads(sample["answer"])["label"] in ("billing", "shipping"), sample
    (tmp_path / "bad.json").write_text(json.dumps({"type": "string", "format": "postcode"}))
    refused = cli("training", "evaluations", "start", "--model", MODEL, "--dataset", f"{labelled['name']}/tickets",
                  "--project", labelled["name"], "--response-schema", str(tmp_path / "bad.json"))
    assert refused.code == 1 and "responseSchema cannot be used for constrained decoding" in refused.err, refused.err


def test_a_judge_model_grades_each_answer(labelled, sqlite_server, capsys):
    """The base model judges the adapter's answers under the instructions given: served for the evaluation, its
    reply is read as a score, and a reply without one leaves the example unscored, quoting it."""
    cli = Cli(capsys, sqlite_server.url)
    judged = followed(cli, "training", "evaluations", "start", "--model", labelled["model"], "--dataset", "tickets",
                      "--grader", f"model:{MODEL}", "--grader-instructions", "Score 1 when the answer is JSON.",
                      "--max-new-tokens", "12", "--wait", "--exit-status")
    assert judged["phase"] == "COMPLETED" and judged["grader"] == f"model:{MODEL}"
    assert judged["graderInstructions"] == "Score 1 when the answer is JSON."
    assert judged["report"]["scored"] + judged["report"]["unscored"] == 24
    answers = cli.json("training", "evaluations", "predictions", judged["evaluationId"])["predictions"]
    assert len(answers) == 24
    for p in answers:
        if p["score"] is None:
            assert p["explanation"].startswith(f"the judge {MODEL} gave no score between 0 and 1: ")
        else:
            assert 0 <= p["score"] <= 1 and p["explanation"].startswith(f"judged by {MODEL}")


def test_refusals_name_what_to_change(labelled, sqlite_server, capsys):
    cli, client = Cli(capsys, sqlite_server.url), labelled["client"]
    before = len(client.get("/v1/training/evaluations").json()["evaluations"])
    no_project = cli("training", "evaluations", "start", "--model", MODEL, "--dataset", f"{labelled['name']}/tickets")
    assert no_project.code == 1 and "belongs to no project" in no_project.err and "--project" in no_project.err
    judge = cli("training", "evaluations", "start", "--model", labelled["model"], "--dataset", "tickets",
                "--grader", "model:x/judge")
    assert judge.code == 1 and "no base model 'x/judge'" in judge.err
    not_judged = cli("training", "evaluations", "start", "--model", labelled["model"], "--dataset", "tickets",
                     "--grader-instructions", "be strict")
    assert not_judged.code == 1 and "graderInstructions are for a judge model's grader" in not_judged.err
    bundle = cli("training", "evaluations", "start", "--model", labelled["model"], "--dataset", "tickets",
                 "--grader", "bundle:x/scorers#score")
    assert bundle.code == 1 and "needs a scoring bundle" in bundle.err
    other = cli("training", "evaluations", "start", "--model", labelled["model"], "--dataset", "tickets",
                "--project", "elsewhere")
    assert other.code == 1 and f"belongs to project {labelled['name']}" in other.err
    missing = client.post("/v1/training/evaluations", json={"model": labelled["model"], "dataset": "nope"})
    assert missing.status_code == 404
    nowhere = cli("training", "evaluations", "start", "--model", labelled["model"], "--dataset", "tickets",
                  "--device-profile", "h100")
    assert nowhere.code == 1 and "deviceProfile 'h100' is not a device profile of this deployment" in nowhere.err
    assert len(client.get("/v1/training/evaluations").json()["evaluations"]) == before

    # a row whose answer calls tools is refused by its line once the worker reads it
    refused = followed(cli, "training", "evaluations", "start", "--model", labelled["model"], "--dataset",
                       "tools", "--wait")
    assert refused["phase"] == "FAILED"
    assert "tools:v1 line 1: the expected answer calls tools" in refused["failureReason"]


def _running(client: httpx.Client, evaluation_id: str) -> dict:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        item = client.get(f"/v1/training/evaluations/{evaluation_id}").json()
        if item["phase"] != "QUEUED":
            return item
        time.sleep(0.1)
    raise AssertionError(f"evaluation {evaluation_id} stayed queued")


def test_cancel_and_a_lost_worker_free_the_device(labelled, sqlite_server, capsys):
    import psutil

    cli, client = Cli(capsys, sqlite_server.url), labelled["client"]
    # sampled hot, 8 answers a row: answers that run on to their budget, so the evaluation is still running when it is
    # cancelled (greedy, the trained adapter answers and stops at once, and could be done before the cancel)
    body = {"model": labelled["model"], "dataset": "tickets", "maxNewTokens": 4000, "generations": 8,
            "temperature": 2.0}
    first = client.post("/v1/training/evaluations", json=body).json()
    assert _running(client, first["evaluationId"])["phase"] == "RUNNING"
    refused = cli("training", "projects", "archive", labelled["name"])  # work in progress is named
    assert refused.code == 1 and f"evaluation {first['evaluationId'][:12]} (RUNNING)" in refused.err
    cancelled = cli.json("training", "evaluations", "cancel", first["evaluationId"])
    assert cancelled["phase"] == "CANCELLED" and cancelled["devicesHeld"] == []
    refused = client.post(f"/v1/training/evaluations/{first['evaluationId']}/cancel")
    assert refused.status_code == 200  # already cancelled: nothing more to do

    second = client.post("/v1/training/evaluations", json=body).json()
    assert _running(client, second["evaluationId"])["phase"] == "RUNNING"
    found, deadline = [], time.monotonic() + 20
    while not found and time.monotonic() < deadline:  # the process starts right after the grant
        found = [p for p in psutil.process_iter(["cmdline"]) if second["evaluationId"] in (p.info.get("cmdline") or [])]
        time.sleep(0.1)
    [worker] = found
    worker.kill()  # a lost worker: the evaluation is queued again and goes on as its next attempt
    deadline = time.monotonic() + 60
    again = client.get(f"/v1/training/evaluations/{second['evaluationId']}").json()
    while not (again["phase"] == "RUNNING" and again["attempt"] == 2) and time.monotonic() < deadline:
        time.sleep(0.2)
        again = client.get(f"/v1/training/evaluations/{second['evaluationId']}").json()
    assert again["phase"] == "RUNNING" and again["attempt"] == 2, again
    assert worker.pid not in [p.pid for p in psutil.process_iter(["cmdline"])
                              if second["evaluationId"] in (p.info.get("cmdline") or [])]
    cancelled = cli.json("training", "evaluations", "cancel", second["evaluationId"])
    assert cancelled["phase"] == "CANCELLED" and cancelled["devicesHeld"] == []
    claims = client.get("/v1/training/capacity").json()["claims"]
    assert not [c for c in claims if c["for"] in (first["evaluationId"], second["evaluationId"])], claims

    # archived, the project's evaluations leave the list unless asked for, and it takes no new ones
    cli.ok("training", "projects", "archive", labelled["name"])
    mine = {first["evaluationId"], second["evaluationId"]}
    assert not mine & {e["evaluationId"] for e in cli.json("training", "evaluations", "list")["evaluations"]}
    shown = cli.json("training", "evaluations", "list", "--archived")["evaluations"]
    assert all(e["projectArchived"] for e in shown if e["evaluationId"] in mine) and mine <= {
        e["evaluationId"] for e in shown}
    refused = client.post("/v1/training/evaluations", json=body)
    assert refused.status_code == 400 and "is archived and takes no new work" in refused.json()["detail"]
    cli.ok("training", "projects", "unarchive", labelled["name"])


def test_a_retry_keeps_the_answers_of_the_commit_it_resolves_to_and_answers_the_rest_again(server_factory, tmp_path,
                                                                                          capsys):
    import shutil

    proc = server_factory("retry")
    cli, client = Cli(capsys, proc.url), httpx.Client(base_url=proc.url, headers=proc.headers, timeout=600)
    client.post(f"/v1/training/base-models/{MODEL}/select", json=from_standin(MODEL)).raise_for_status()
    rows = [chat_row(f"Label this ticket: {text}", json.dumps({"label": label})) for text, label in TICKETS]
    from optimize.cli.main import main

    assert main(["registry", "datasets", "register", "retry/tickets", "-f",
                 str(write_jsonl(tmp_path / "t.jsonl", rows)), "--server", proc.url]) == 0
    client.post("/v1/training/projects", json={"name": "retry"}).raise_for_status()
    first = followed(cli, "training", "evaluations", "start", "--model", MODEL, "--dataset", "retry/tickets",
                     "--project", "retry", "--max-new-tokens", "4", "--wait")
    old_commit = first["baseModel"]["commit"]
    before = cli.json("training", "evaluations", "predictions", first["evaluationId"])["predictions"]
    assert {p["baseModelRevision"] for p in before} == {old_commit}

    kept = cli.ok("training", "evaluations", "retry", first["evaluationId"])
    assert "6 of 6 answers kept" in kept.out  # the same commit: nothing to answer again
    again = followed(cli, "training", "evaluations", "wait", first["evaluationId"])
    assert again["phase"] == "COMPLETED" and again["attempt"] == 2
    assert cli.json("training", "evaluations", "predictions", first["evaluationId"])["predictions"] == before

    # the base model selected again from a changed snapshot: another commit
    selected = client.get(f"/v1/training/base-models/{MODEL}").json()["selection"]["path"]
    changed = tmp_path / "changed"
    shutil.copytree(selected, changed)
    (changed / "NOTES.txt").write_text("a local change, so another commit\n")
    client.post(f"/v1/training/base-models/{MODEL}/select", json={"from": str(changed)}).raise_for_status()
    queued = cli.json("training", "evaluations", "retry", first["evaluationId"])
    new_commit = queued["baseModel"]["commit"]
    assert new_commit != old_commit and queued["progress"]["answered"] == 0
    done = followed(cli, "training", "evaluations", "wait", first["evaluationId"])
    assert done["phase"] == "COMPLETED" and done["report"]["scored"] == 6
    after = cli.json("training", "evaluations", "predictions", first["evaluationId"])["predictions"]
    assert [p["line"] for p in after] == list(range(1, 7))
    assert {p["baseModelRevision"] for p in after} == {new_commit}  # every row answered again
    running = client.post("/v1/training/evaluations", json={"model": MODEL, "dataset": "retry/tickets",
                                                            "project": "retry", "maxNewTokens": 4000}).json()
    refused = client.post(f"/v1/training/evaluations/{running['evaluationId']}/retry")
    assert refused.status_code == 409 and "retry it once it has ended" in refused.json()["detail"]
    client.post(f"/v1/training/evaluations/{running['evaluationId']}/cancel").raise_for_status()


def _proxy(url: str, endpoint: str):
    """`akka training endpoints proxy ENDPOINT --port 0` as a process, and the address it reports."""
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, "-m", "optimize", "training", "endpoints", "proxy", endpoint,
                                "--port", "0", "-o", "json-compact", "--server", url], stdout=subprocess.PIPE,
                               text=True)
    return process, json.loads(process.stdout.readline())["url"]


def test_an_endpoint_answers_the_openai_client_for_the_base_and_the_adapter(labelled, sqlite_server, capsys):
    from openai import NotFoundError, OpenAI

    cli, client, model = Cli(capsys, sqlite_server.url), labelled["client"], labelled["model"]
    created = followed(cli, "training", "endpoints", "create", "--model", MODEL, "--project", labelled["name"],
                       "--wait", "--timeout", "300")
    endpoint = created["endpointId"]
    proxy = None
    try:
        assert created["phase"] == "READY" and len(created["devicesHeld"]) == 1, created
        # the candidate's base is served: it attaches to the same endpoint, on no new device
        attached = followed(cli, "training", "endpoints", "create", "--model", model, "--wait", "--timeout", "120")
        assert attached["endpointId"] == endpoint and attached["devicesHeld"] == created["devicesHeld"]
        assert [m["name"] for m in attached["models"] if m["ready"]] == [MODEL, model]
        claims = [c for c in client.get("/v1/training/capacity").json()["claims"] if c["for"] == endpoint]
        assert len(claims) == 1, claims

        openai = OpenAI(base_url=f"{sqlite_server.url}/v1", api_key=sqlite_server.token, max_retries=0)
        assert {MODEL, model} <= {m.id for m in openai.models.list()}
        question = [{"role": "user", "content": "Label this ticket: I was charged twice"}]
        answers = {}
        for name in (MODEL, model, model.rsplit(":", 1)[0]):  # `proj/name` names the newest version
            whole = openai.chat.completions.create(model=name, messages=question, max_tokens=12, temperature=0)
            streamed = openai.chat.completions.create(model=name, messages=question, max_tokens=12, temperature=0,
                                                      stream=True)
            text = "".join(chunk.choices[0].delta.content or "" for chunk in streamed if chunk.choices)
            assert text == whole.choices[0].message.content, (name, text)
            assert whole.usage.completion_tokens >= 1 and whole.choices[0].finish_reason in ("stop", "length")
            answers[name] = whole
        assert answers[model].model == model and answers[model.rsplit(":", 1)[0]].model == model
        assert json.loads(answers[model].choices[0].message.content) == {"label": "billing"}
        assert answers[MODEL].choices[0].message.content != answers[model].choices[0].message.content

        sent = cli.json("training", "endpoints", "send", endpoint[:10], "--model", model, "--input",
                        "Label this ticket: where is my package", "--temperature", "0", "--max-tokens", "12")
        assert json.loads(sent["choices"][0]["message"]["content"])["label"] in ("billing", "shipping")
        assert sent["model"] == model
        with pytest.raises(NotFoundError, match="is not served by any endpoint"):
            openai.chat.completions.create(model=f"{labelled['name']}/nothing", messages=question)
        refused = client.post("/v1/chat/completions", json={"model": model, "messages": []})
        assert refused.status_code == 400 and "messages must be a non-empty list" in refused.text

        # the proxy forwards chat completions only, streaming included
        proxy, address = _proxy(sqlite_server.url, endpoint[:12])
        local = OpenAI(base_url=address, api_key="unused", max_retries=0)
        streamed = local.chat.completions.create(model=model, messages=question, max_tokens=12, temperature=0,
                                                 stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == \
            answers[model].choices[0].message.content
        assert httpx.get(f"{address}/models").status_code == 404

        detached = cli.json("training", "endpoints", "detach", endpoint, model)
        assert [m["name"] for m in detached["models"]] == [MODEL]
        assert model not in {m.id for m in openai.models.list()}
    finally:
        if proxy is not None:
            proxy.kill()
        deleted = cli.json("training", "endpoints", "delete", endpoint)
    assert deleted["phase"] == "DELETED" and deleted["devicesHeld"] == []
    assert not [c for c in client.get("/v1/training/capacity").json()["claims"] if c["for"] == endpoint]
    assert cli("training", "endpoints", "send", endpoint, "--input", "hi").code == 1
