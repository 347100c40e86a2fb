"""Third-party clients that speak the OpenAI API work unchanged against a trained adapter (a short supervised run of
the tiny Llama stand-in, served by an endpoint of the module's own server, asked for by its registry reference):

- LiteLLM's `completion()` through its `openai/` provider: a plain chat answer, and answers in a pydantic model's
  schema (response_format json_schema) that parse as that model;
- the UK AISI's Inspect (`inspect_ai.eval`, in-process, nothing downloaded) through its default `openai/` provider:
  over the Responses API (`POST /v1/responses`), the path it takes for a model name it does not know (asking to
  include encrypted reasoning, of which answers hold none), and over chat completions when told to;
- the official `openai` client: 100 answers sampled at temperature 1 under a strict json_schema, every one valid
  JSON of that schema, and a forced tool call.
"""

from __future__ import annotations

import json
from typing import Literal

import httpx
import pytest
from pydantic import BaseModel, ConfigDict

from tests.conftest import start_server
from tests.run_fixtures import capitals_project, plan, wait_for

pytestmark = pytest.mark.integration


class Triage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    label: Literal["billing", "bug", "other"]
    urgent: bool


@pytest.fixture(scope="module")
def adapter(tmp_path_factory):
    """(the server, the served adapter's registry reference): one short supervised run, its adapter on an endpoint."""
    folder = tmp_path_factory.mktemp("adapter-clients")
    proc = start_server(folder / "server")
    client = httpx.Client(base_url=proc.url, headers=proc.headers, timeout=60)
    endpoint = None
    try:
        document = plan(capitals_project(proc.url, folder, "oa")["name"], "chat")
        document["config"]["hyperparams"]["training"]["maxSteps"] = 4
        started = client.post("/v1/training/runs", json=document)
        assert started.status_code == 202, started.text
        run = wait_for(client, f"/v1/training/runs/{started.json()['runId']}", lambda r: r["phase"] == "COMPLETED",
                       fail_if=lambda r: r["terminal"])
        model = run["results"]["model"]
        created = client.post("/v1/training/endpoints", json={"model": model})
        assert created.status_code == 202, created.text
        endpoint = created.json()["endpointId"]
        served = wait_for(client, f"/v1/training/endpoints/{endpoint}",
                          lambda e: e["phase"] == "READY" and e["settled"], fail_if=lambda e: e["terminal"])
        assert {"name": model, "kind": "adapter", "ready": True} in [
            {key: m[key] for key in ("name", "kind", "ready")} for m in served["models"]]
        yield proc, model
    finally:
        if endpoint is not None:
            client.delete(f"/v1/training/endpoints/{endpoint}")
        client.close()
        proc.stop()


def test_litellm_completion_answers_plainly_and_in_a_pydantic_model_s_schema(adapter, monkeypatch):
    # LiteLLM fetches its model price list from GitHub when imported unless told to read the copy it ships
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    proc, model = adapter
    reach = {"model": f"openai/{model}", "api_base": f"{proc.url}/v1", "api_key": proc.token, "num_retries": 0}
    asked = [{"role": "user", "content": "What is the capital of France?"}]
    plain = litellm.completion(messages=asked, max_tokens=16, temperature=0, **reach)
    assert plain.model == model and plain.choices[0].message.content
    assert plain.choices[0].finish_reason in ("stop", "length") and plain.usage.completion_tokens <= 16

    structured = litellm.completion(messages=[{"role": "user", "content": "Triage: my invoice is wrong"}],
                                    response_format=Triage, n=4, temperature=1.0, seed=3, max_tokens=200, **reach)
    assert len(structured.choices) == 4
    for choice in structured.choices:
        assert choice.finish_reason == "stop", choice
        Triage.model_validate_json(choice.message.content)


def _inspect_eval(adapter, monkeypatch, tmp_path, responses_api: bool | None):
    """One Inspect eval of two samples against the adapter (its provider's default API, or the one named); its
    log."""
    import inspect_ai
    from inspect_ai.dataset import Sample
    from inspect_ai.scorer import includes
    from inspect_ai.solver import generate

    proc, model = adapter
    monkeypatch.setenv("OPENAI_API_KEY", proc.token)
    task = inspect_ai.Task(dataset=[Sample(input=f"What is the capital of {country}?", target=city)
                                    for country, city in (("France", "Paris"), ("Italy", "Rome"))],
                           solver=generate(), scorer=includes())
    [log] = inspect_ai.eval(task, model=f"openai/{model}", model_base_url=f"{proc.url}/v1",
                            model_args={} if responses_api is None else {"responses_api": responses_api},
                            log_dir=str(tmp_path), display="none",
                            max_tokens=16, temperature=0.0)  # greedy: a sampled first token can end the answer
    assert log.status == "success", log.error
    assert [s.error for s in log.samples] == [None, None]
    assert all(s.output.completion and s.scores["includes"].value in ("C", "I") for s in log.samples)
    return log


def test_inspect_ai_s_default_provider_evaluates_the_adapter_through_the_responses_api(adapter, monkeypatch,
                                                                                        tmp_path):
    log = _inspect_eval(adapter, monkeypatch, tmp_path, responses_api=None)
    # each sample's model call was answered by /v1/responses: a `response` object, not a chat completion
    calls = [event.call.response for s in log.samples for event in s.events if event.event == "model"]
    assert calls and all(call["object"] == "response" and call["id"].startswith("resp_") for call in calls)


def test_inspect_ai_evaluates_the_adapter_through_chat_completions(adapter, monkeypatch, tmp_path):
    log = _inspect_eval(adapter, monkeypatch, tmp_path, responses_api=False)
    calls = [event.call.response for s in log.samples for event in s.events if event.event == "model"]
    assert calls and all(call["object"] == "chat.completion" for call in calls)


SCHEMA = {"type": "object", "additionalProperties": False,
          "required": ["capital", "country", "code", "population", "coastal", "languages"],
          "properties": {"capital": {"type": "string", "maxLength": 24},
                         "country": {"enum": ["France", "Italy", "Spain", "Japan"]},
                         "code": {"type": "string", "pattern": "^[A-Z]{2}$"},
                         "population": {"type": "integer", "minimum": 0, "maximum": 100_000_000},
                         "coastal": {"type": "boolean"},
                         "languages": {"type": "array", "items": {"type": "string", "maxLength": 12},
                                       "minItems": 1, "maxItems": 3}}}


def test_a_hundred_answers_sampled_under_a_strict_schema_all_validate_against_it(adapter):
    import jsonschema
    from openai import OpenAI

    proc, model = adapter
    openai = OpenAI(base_url=f"{proc.url}/v1", api_key=proc.token, max_retries=0)
    answers = []
    # n is at most 16: ten requests of ten choices. The server seeds a request's choice i with seed + i, so the
    # requests' seeds are ten apart and no two of the hundred samples share one.
    for seed in range(0, 100, 10):
        answer = openai.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "What is the capital of France?"}], n=10,
            response_format={"type": "json_schema", "json_schema": {"name": "capital", "schema": SCHEMA,
                                                                    "strict": True}},
            temperature=1.0, seed=seed, max_tokens=200)  # the tiny vocabulary writes JSON a few characters a token
        answers += [(choice.finish_reason, choice.message.content) for choice in answer.choices]
    assert len(answers) == 100
    for finish, content in answers:
        assert finish == "stop", content
        jsonschema.validate(json.loads(content), SCHEMA)
    assert len({content for _, content in answers}) == 100  # a hundred samples, none repeated


def test_a_forced_tool_call_on_the_adapter_names_the_tool_with_arguments_of_its_schema(adapter):
    from openai import OpenAI

    proc, model = adapter
    openai = OpenAI(base_url=f"{proc.url}/v1", api_key=proc.token, max_retries=0)
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"days": {"enum": [1, 2, 3]}}, "required": ["days"],
        "additionalProperties": False}}}
    called = openai.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "What will the weather be in Paris?"}], tools=[weather],
        tool_choice={"type": "function", "function": {"name": "get_weather"}}, temperature=1.0, max_tokens=64)
    [call] = called.choices[0].message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments)["days"] in (1, 2, 3)
    assert called.choices[0].finish_reason == "tool_calls" and called.model == model
