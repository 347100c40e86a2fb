"""OpenAI's Responses API over the chat completer (the real Transformers engine on the SmolLM2 stand-in): input as a
string or items (messages, function calls and their outputs), instructions, function tools, text.format, whole and
streamed answers in the Responses shape, and previous_response_id going on from a kept conversation."""

from __future__ import annotations

import json

import pytest

from optimize.serving.completions import Completer, RequestError
from optimize.serving.responses import NotKept, Responder

pytest.importorskip("torch")

WEATHER = {"type": "function", "name": "get_weather", "parameters": {
    "type": "object", "properties": {"days": {"enum": [1, 2]}}, "required": ["days"], "additionalProperties": False}}


@pytest.fixture(scope="module")
def responder(tmp_path_factory):
    from optimize.catalog.standins import StandIn, build
    from optimize.chat.render import ChatRenderer
    from optimize.serving.engine import ServingModel

    folder = tmp_path_factory.mktemp("responses") / "model"
    build(StandIn("smollm2"), folder)
    engine = ServingModel(folder)
    yield Responder(Completer(engine, ChatRenderer.from_pretrained(str(folder)), "hermes", 4096))
    engine.close()


def test_a_string_input_answers_with_a_message_and_the_conversation_goes_on(responder):
    first = responder.complete(None, responder.read({"model": "m", "input": "Hello", "max_output_tokens": 8,
                                                     "temperature": 0, "instructions": "Be brief."}))
    assert first["object"] == "response" and first["id"].startswith("resp_")
    assert first["status"] == "incomplete" and first["incomplete_details"] == {"reason": "max_output_tokens"}
    [message] = first["output"]
    assert message["type"] == "message" and message["content"][0]["type"] == "output_text"
    assert first["output_text"] == message["content"][0]["text"]
    assert first["usage"]["output_tokens"] == 8 and first["instructions"] == "Be brief."
    following = responder.read({"model": "m", "input": "And then?", "previous_response_id": first["id"]})
    roles = [m["role"] for m in following.chat.messages]
    assert roles == ["user", "assistant", "user"]  # the earlier instructions are not carried over
    with pytest.raises(NotKept):
        responder.read({"model": "m", "input": "x", "previous_response_id": "resp_gone"})


def test_function_tools_a_forced_call_and_its_output_item(responder):
    asked = responder.read({"model": "m", "input": [{"role": "user", "content": "Weather?"}], "tools": [WEATHER],
                            "tool_choice": {"type": "function", "name": "get_weather"}, "max_output_tokens": 200})
    answer = responder.complete(None, asked)
    [call] = [item for item in answer["output"] if item["type"] == "function_call"]
    assert call["name"] == "get_weather" and json.loads(call["arguments"])["days"] in (1, 2)
    after = responder.read({"model": "m", "previous_response_id": answer["id"], "input": [
        {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}], "tools": [WEATHER]})
    assert after.chat.messages[-1] == {"role": "tool", "tool_call_id": call["call_id"], "content": "sunny"}
    assert after.chat.messages[-2]["tool_calls"][0]["id"] == call["call_id"]


def test_a_json_schema_format_and_a_streamed_answer(responder):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    answer = responder.complete(None, responder.read({"model": "m", "input": "Fine?", "text": {"format": {
        "type": "json_schema", "name": "check", "schema": schema, "strict": True}}}))
    assert json.loads(answer["output_text"])["ok"] in (True, False)
    events = list(responder.chunks(None, responder.read({"model": "m", "input": "Hello", "stream": True,
                                                         "max_output_tokens": 6, "temperature": 0})))
    kinds = [event.split("\n")[0].removeprefix("event: ") for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.incomplete"
    deltas = "".join(json.loads(e.split("data: ", 1)[1])["delta"] for e in events
                     if e.startswith("event: response.output_text.delta"))
    last = json.loads(events[-1].split("data: ", 1)[1])["response"]
    assert deltas == last["output_text"] and last["usage"]["output_tokens"] == 6
    numbers = [json.loads(e.split("data: ", 1)[1])["sequence_number"] for e in events]
    assert numbers == list(range(len(events)))


def test_encrypted_reasoning_may_be_asked_for_and_there_is_none(responder):
    """Inspect asks for it whenever it does not store responses; an answer holds no reasoning items to encrypt."""
    asked = responder.read({"model": "m", "input": "x", "include": ["reasoning.encrypted_content"], "store": False})
    assert asked.chat.messages == [{"role": "user", "content": "x"}]


@pytest.mark.parametrize(("body", "param"), [
    ({"input": ""}, "input"), ({"input": [{"type": "reasoning"}]}, "input"),
    ({"input": "x", "tools": [{"type": "web_search"}]}, "tools"), ({"input": "x", "max_output_tokens": 0},
                                                                   "max_output_tokens"),
    ({"input": "x", "text": {"format": {"type": "json_schema", "schema": {"type": "string", "format": "nope"}}}},
     "text.format"), ({"input": "x", "background": True}, "background"), ({"input": "x", "seed": 1}, "seed"),
    ({"input": "x", "include": ["message.output_text.logprobs"]}, "include"), ({"input": "x", "include": "all"},
                                                                                "include"),
])
def test_what_the_route_cannot_answer_is_refused_naming_the_responses_field(responder, body, param):
    with pytest.raises(RequestError) as refused:
        responder.read({"model": "m", **body})
    assert refused.value.param == param, str(refused.value)
