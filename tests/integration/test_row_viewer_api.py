"""What the dashboard's row viewer reads: a page of a dataset version's rows as stored
(`GET /v1/registry/datasets/NS/NAME/versions/SEL/rows`), and a row rendered as a base model's chat template renders
it for a supervised run (`POST /v1/training/base-models/ID/render`), each token marked trained or not — the same
count an analysis gives; refusals name what to change; the server imports no torch for it."""

from __future__ import annotations

import uuid

import httpx
import pytest

from tests.conftest import chat_row, from_standin, write_jsonl

pytestmark = pytest.mark.integration
MODEL = "optimize/tiny-llama-3.2"
TOOL = {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}


@pytest.fixture(scope="module")
def registered(sqlite_server, tmp_path_factory):
    client = httpx.Client(base_url=sqlite_server.url, headers=sqlite_server.headers, timeout=120)
    client.post(f"/v1/training/base-models/{MODEL}/select", json=from_standin(MODEL)).raise_for_status()
    name = f"rv{uuid.uuid4().hex[:8]}"
    rows = [chat_row(f"Question {i}?", f"Answer {i}.") for i in range(30)]
    rows[3] = {**rows[3], "tools": [TOOL]}
    from optimize.cli.main import main

    path = write_jsonl(tmp_path_factory.mktemp("rows") / "r.jsonl", rows)
    assert main(["registry", "datasets", "register", f"{name}/chat", "-f", str(path), "--server",
                 sqlite_server.url]) == 0
    return {"client": client, "name": name, "rows": rows}


def test_a_page_of_rows_as_stored(registered):
    client, name = registered["client"], registered["name"]
    page = client.get(f"/v1/registry/datasets/{name}/chat/versions/latest/rows", params={"offset": 2, "limit": 3})
    assert page.status_code == 200, page.text
    body = page.json()
    assert body["reference"] == f"{name}/chat:v1" and body["rows"] == 30 and body["offset"] == 2
    assert [item["line"] for item in body["items"]] == [3, 4, 5]
    assert body["items"][1]["row"] == registered["rows"][3]
    end = client.get(f"/v1/registry/datasets/{name}/chat/versions/v1/rows", params={"offset": 28, "limit": 50})
    assert [item["line"] for item in end.json()["items"]] == [29, 30]
    many = client.get(f"/v1/registry/datasets/{name}/chat/versions/v1/rows", params={"limit": 1000}).json()
    assert len(many["items"]) == 30  # every row (a page holds at most 100, whatever limit asks)
    assert client.get(f"/v1/registry/datasets/{name}/chat/versions/v1/rows", params={"limit": 0}).status_code == 422
    assert client.get(f"/v1/registry/datasets/{name}/nope/versions/v1/rows").status_code == 404


def test_a_row_renders_with_its_trained_tokens_marked(registered, sqlite_server):
    client = registered["client"]
    row = registered["rows"][3]
    rendered = client.post(f"/v1/training/base-models/{MODEL}/render", json={"row": row})
    assert rendered.status_code == 200, rendered.text
    body = rendered.json()
    assert body["model"] == MODEL and body["tools"] == ["weather"] and len(body["chatTemplateSha256"]) == 64
    assert "".join(text for text, _ in body["tokens"]) == body["text"]
    trained = "".join(text for text, trains in body["tokens"] if trains)
    assert "Answer 3." in trained and "Question 3?" not in trained  # the answer trains, the question does not
    assert body["trainedTokens"] == sum(1 for _, trains in body["tokens"] if trains) < body["totalTokens"]

    two = {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "first"},
                        {"role": "user", "content": "b"}, {"role": "assistant", "content": "second"}]}
    final = client.post(f"/v1/training/base-models/{MODEL}/render", json={"row": two}).json()
    every = client.post(f"/v1/training/base-models/{MODEL}/render",
                        json={"row": two, "loss": {"assistantTurns": "all"}}).json()
    assert every["trainedTokens"] > final["trainedTokens"]  # loss.assistantTurns: all trains the first answer too
    maps = open(f"/proc/{sqlite_server.process.pid}/maps").read()
    assert "libtorch" not in maps  # the server rendered with the fast tokenizer alone: it stays light


@pytest.mark.parametrize("body, status, words", [
    ({"row": {"messages": [{"role": "user", "content": "no answer"}]}}, 422, "row rule"),
    ({"row": {"messages": []}}, 422, "row rule"),
    ({"row": {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]},
      "loss": {"assistantTurns": "some"}}, 422, "assistantTurns"),
    ({"rows": []}, 422, "row"),
])
def test_a_bad_render_request_is_refused_by_name(registered, body, status, words):
    answer = registered["client"].post(f"/v1/training/base-models/{MODEL}/render", json=body)
    assert answer.status_code == status and words in answer.text, answer.text


def test_a_model_not_selected_is_refused(registered):
    # a hub model, never selected on this offline deployment (the shared server's other tests select stand-ins)
    answer = registered["client"].post("/v1/training/base-models/meta-llama/llama-3.2-1b-instruct/render",
                                       json={"row": chat_row("q", "a")})
    assert answer.status_code == 404 and "select it first" in answer.json()["hint"]
