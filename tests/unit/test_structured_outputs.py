"""Structured outputs on the real Transformers engine (the SmolLM2 stand-in, whose random weights would never write
JSON unprompted): `response_format` json_object and json_schema, and a `tool_choice` that forces a call, each answer
sampled at temperature 1 parsing against its schema; rows constrained differently decode in one batch beside a free
one; a schema llguidance cannot compile is refused naming the field."""

from __future__ import annotations

import json

import jsonschema
import pytest

from optimize.core.errors import ParamError
from optimize.serving.completions import Completer, read_request

pytest.importorskip("torch")

SCHEMA = {"type": "object", "properties": {"label": {"enum": ["billing", "bug", "other"]},
                                           "urgent": {"type": "boolean"}, "note": {"type": "string", "maxLength": 12}},
          "required": ["label", "urgent", "note"], "additionalProperties": False}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 10}, "days": {"enum": [1, 2, 3]}},
    "required": ["city", "days"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"enum": ["CET", "UTC"]}}, "required": ["zone"],
    "additionalProperties": False}}}  # as a strict tool's: a random model would write keys of its own


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from optimize.catalog.standins import StandIn, build
    from optimize.chat.render import ChatRenderer
    from optimize.serving.engine import ServingModel

    folder = tmp_path_factory.mktemp("structured") / "model"
    build(StandIn("smollm2"), folder)
    engine = ServingModel(folder)
    yield Completer(engine, ChatRenderer.from_pretrained(str(folder)), "hermes", 4096)
    engine.close()


def asked(**fields) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": "Triage: my invoice is wrong"}],
            "temperature": 1.0, "max_tokens": 200, **fields}


def test_json_schema_answers_parse_against_their_schema(served):
    form = {"type": "json_schema", "json_schema": {"name": "triage", "strict": True, "schema": SCHEMA}}
    answers = []
    for seed in range(10):
        answer = served.complete(None, read_request(asked(response_format=form, n=10, seed=seed * 10)))
        answers += [choice["message"]["content"] for choice in answer["choices"]]
    assert len(answers) == 100
    for text in answers:
        jsonschema.validate(json.loads(text), SCHEMA)
    assert len(set(answers)) > 10  # sampled, not one answer forced


def test_json_object_answers_are_json_objects(served):
    answer = served.complete(None, read_request(asked(response_format={"type": "json_object"}, n=4, seed=3,
                                                      max_tokens=400)))
    for choice in answer["choices"]:
        if choice["finish_reason"] == "stop":
            assert isinstance(json.loads(choice["message"]["content"]), dict)


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_a_forced_tool_call_is_a_call_of_an_offered_tool_with_arguments_of_its_schema(served, choice):
    answer = served.complete(None, read_request(asked(tools=[WEATHER, TIME], tool_choice=choice, n=8, seed=1)))
    schemas = {tool["function"]["name"]: tool["function"]["parameters"] for tool in (WEATHER, TIME)}
    for item in answer["choices"]:
        assert item["finish_reason"] == "tool_calls", item
        [call] = item["message"]["tool_calls"]
        name = call["function"]["name"]
        assert choice == "required" or name == "get_weather"
        jsonschema.validate(json.loads(call["function"]["arguments"]), schemas[name])


def test_a_forced_call_s_json_has_no_whitespace_of_the_model_s_choosing(served):
    """As a response's JSON: otherwise a sampled answer may spend its tokens on whitespace and never close the call.
    Every token writes at least one character, so as many tokens as the call has characters always close it."""
    call = '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>'
    answer = served.complete(None, read_request(asked(tools=[TIME], tool_choice="required", n=16, seed=5,
                                                      max_tokens=len(call) + 1)))
    assert [item["finish_reason"] for item in answer["choices"]] == ["tool_calls"] * 16


def test_constrained_and_free_rows_decode_together(served):
    import threading

    form = {"type": "json_schema", "json_schema": {"name": "triage", "schema": SCHEMA}}
    results: dict = {}

    def ask(name, request):
        results[name] = served.complete(None, read_request(request))

    threads = [threading.Thread(target=ask, args=("json", asked(response_format=form, seed=2))),
               threading.Thread(target=ask, args=("free", asked(seed=2, max_tokens=20)))]
    with served.engine.lock:
        for thread in threads:
            thread.start()
    for thread in threads:
        thread.join(60)
    jsonschema.validate(json.loads(results["json"]["choices"][0]["message"]["content"]), SCHEMA)
    assert results["free"]["choices"][0]["finish_reason"] in ("length", "stop")


@pytest.mark.parametrize(("fields", "param", "words"), [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "string", "format": "no-such-format"}}}}, "response_format.json_schema.schema", "no-such-format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}}, "response_format",
     "json_schema.name"),
    ({"response_format": {"type": "xml"}}, "response_format", "'xml'"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_time"}}}, "tool_choice",
     "which the request's tools do not offer"),
    ({"tool_choice": "required"}, "tool_choice", "offers no tools"),
    ({"tools": [WEATHER], "tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice",
     "cannot both shape one answer"),
])
def test_what_cannot_be_constrained_is_refused_naming_the_field(fields, param, words):
    with pytest.raises(ParamError) as refused:
        read_request(asked(**fields))
    assert refused.value.param == param and words in str(refused.value), str(refused.value)


def test_transformers_generate_holds_greedy_and_sampled_answers_to_a_schema(tmp_path):
    """What an evaluation with --response-schema answers with: Transformers `generate` under the grammar, batched
    and left-padded, one greedy answer a prompt and several sampled ones."""
    from optimize.catalog.standins import StandIn, build
    from optimize.chat.generation import TransformersGenerator
    from optimize.chat.grammars import json_constraint

    build(StandIn("smollm2"), tmp_path / "model")
    generator = TransformersGenerator(tmp_path / "model")
    constraint = json_constraint(SCHEMA, "responseSchema")
    prompts = [generator.tokenizer(text)["input_ids"] for text in ("Triage this", "A much longer ticket to triage now")]
    for answer in generator.generate(prompts, 200, constraint=constraint):
        jsonschema.validate(json.loads(answer.text), SCHEMA)
    for group in generator.sample(prompts, 200, 3, 1.0, seed=4, constraint=constraint):
        for answer in group:
            jsonschema.validate(json.loads(answer.text), SCHEMA)
