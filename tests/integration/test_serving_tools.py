"""Tool calls through an endpoint: an adapter trained on rows whose answers call a tool, served, asked with the
tools offered through the official `openai` client; the answer's call comes back parsed into `tool_calls` by the
model's parser (the small SmolLM2 stand-in: `hermes`), whole and streamed. The tiny stand-ins barely move from
random in a few dozen updates; the small one learns the call in 40."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from tests.conftest import Cli, from_standin, write_jsonl
from tests.run_fixtures import write_plan

pytestmark = pytest.mark.integration
MODEL = "optimize/small-smollm2"
SYSTEM = "You answer weather questions by calling a tool."
WEATHER = {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}


def _row(city: str) -> dict:
    return {"messages": [{"role": "system", "content": SYSTEM},
                         {"role": "user", "content": f"What is the weather in {city}?"},
                         {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {
                             "name": "weather", "arguments": {"city": city}}}]}],
            "tools": [WEATHER]}


def test_a_served_adapter_answers_with_parsed_tool_calls(sqlite_server, tmp_path, capsys):
    from openai import OpenAI

    from optimize.cli.main import main

    name = f"tl{uuid.uuid4().hex[:8]}"
    client = httpx.Client(base_url=sqlite_server.url, headers=sqlite_server.headers, timeout=600)
    client.post(f"/v1/training/base-models/{MODEL}/select", json=from_standin(MODEL)).raise_for_status()
    rows = [_row(city) for city in ("Paris", "Rome")] * 8
    assert main(["registry", "datasets", "register", f"{name}/calls", "-f",
                 str(write_jsonl(tmp_path / "c.jsonl", rows)), "--server", sqlite_server.url]) == 0
    client.post("/v1/training/projects", json={"name": name}).raise_for_status()
    document = {"kind": "run", "project": name, "baseModel": MODEL, "modelName": "caller",
                "config": {"dataset": "calls", "maxSeqLength": 512, "packing": False,  # 8 rows an update
                           "hyperparams": {"optimizer": {"learningRate": 0.01},
                                           "training": {"maxSteps": 40, "batchSize": 8}}},
                "execution": {"deviceProfile": "cpu"}}
    assert main(["training", "runs", "start", "-f", write_plan(tmp_path, document), "--force", "--wait",
                 "--exit-status", "--server", sqlite_server.url]) == 0
    model = client.get("/v1/training/runs", params={"project": name}).json()["runs"][0]["results"]["model"]

    cli = Cli(capsys, sqlite_server.url)
    created = json.loads(cli.ok("training", "endpoints", "create", "--model", model, "--wait", "--timeout", "300",
                                "-o", "json-compact").out.splitlines()[-1])
    try:
        # a trained model's instructions: its first training row's system message (what `send` uses by default)
        assert [m["instructions"] for m in created["models"]] == [None, SYSTEM]
        openai = OpenAI(base_url=f"{sqlite_server.url}/v1", api_key=sqlite_server.token, max_retries=0)
        question = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is the weather in Paris?"}]
        whole = openai.chat.completions.create(model=model, messages=question, tools=[WEATHER], temperature=0,
                                               max_tokens=48)
        choice = whole.choices[0]
        assert choice.finish_reason == "tool_calls", choice
        [call] = choice.message.tool_calls
        assert call.type == "function" and call.function.name == "weather"
        assert json.loads(call.function.arguments) == {"city": "Paris"}
        # one rule on every route: a request without a system message is answered with the trained instructions
        assert client.get(f"/v1/models/{model}").json()["instructions"] == SYSTEM
        bare = openai.chat.completions.create(model=model, messages=question[1:], tools=[WEATHER], temperature=0,
                                              max_tokens=48)
        assert bare.choices[0].message.tool_calls[0].function.arguments == call.function.arguments

        streamed = list(openai.chat.completions.create(model=model, messages=question, tools=[WEATHER],
                                                       temperature=0, max_tokens=48, stream=True))
        deltas = [c.choices[0].delta for c in streamed if c.choices and c.choices[0].delta.tool_calls]
        [delta] = deltas
        assert delta.tool_calls[0].function.name == "weather"
        assert json.loads(delta.tool_calls[0].function.arguments) == {"city": "Paris"}
        assert streamed[-1].choices[0].finish_reason == "tool_calls"

        # without the tools offered, the same answer is text: nothing is parsed
        plain = openai.chat.completions.create(model=model, messages=question, temperature=0, max_tokens=48)
        assert plain.choices[0].message.tool_calls is None
        sent = cli.json("training", "endpoints", "send", created["endpointId"], "--input",
                        "What is the weather in Rome?", "--temperature", "0", "--max-tokens", "48")
        assert sent["model"] == model and sent["choices"][0]["message"]["content"]
    finally:
        cli.ok("training", "endpoints", "delete", created["endpointId"])
