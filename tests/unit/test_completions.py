"""OpenAI chat completions over an endpoint's engine: requests refused by the field at fault, and answers shaped
as `chat.completion` or as a `chat.completion.chunk` stream.

The Completer runs on a real tokenizer and chat template (the SmolLM2 stand-in: ChatML with hermes
`<tool_call>` calls). The engine is a scripted double that hands over the token ids of a fixed answer the way
`ServingModel.stream` does (stopping after a stop token or at the token limit), since what is checked here is
the response shaping, not generation.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from optimize.core.errors import ParamError
from optimize.serving.batcher import Step
from optimize.serving.completions import DEFAULT_MAX_TOKENS, Completer, RequestError, read_request

USER = [{"role": "user", "content": "What's the weather in Paris?"}]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "The time in a zone",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}}}]
CALLS_ANSWER = ('Let me look that up.\n'
                '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris, France"}}</tool_call>\n'
                '<tool_call>{"name": "get_time", "arguments": {"zone": "CET"}}</tool_call>')
TEXT_ANSWER = "Café au lait ☕ costs 3€ in Paris, about ¥500."


# --- read_request ----------------------------------------------------------------------------------------


def body(**fields):
    return {"model": "optimize/tiny-smollm2", "messages": USER, **fields}


REFUSALS = {  # id: (request body, what the message must name)
    "body-null": (None, "request body"),
    "body-list": ([USER], "request body"),
    "body-string": ("hello", "request body"),
    "no-messages": ({"model": "m"}, "messages"),
    "empty-messages": (body(messages=[]), "messages"),
    "messages-string": (body(messages="hi"), "messages"),
    "message-string": (body(messages=["hi"]), "message 0"),
    "unknown-role": (body(messages=[{"role": "wizard", "content": "hi"}]), "role 'wizard'"),
    "no-content": (body(messages=[{"role": "user"}]), "message 0 (user) has no content"),
    "number-content": (body(messages=[{"role": "user", "content": 5}]), "content"),
    "tools-string": (body(tools="get_weather"), "'tools'"),
    "tool-without-function": (body(tools=[{"type": "function"}]), "tool 0"),
    "n-0": (body(n=0), "n must be a whole number from 1 to 16"),
    "n-17": (body(n=17), "n must be a whole number"),
    "top_k-negative": (body(top_k=-2), "top_k"),
    "min_p-high": (body(min_p=1.5), "min_p"),
    "repetition_penalty-zero": (body(repetition_penalty=0), "repetition_penalty"),
    "presence_penalty-high": (body(presence_penalty=2.5), "presence_penalty"),
    "frequency_penalty-string": (body(frequency_penalty="x"), "frequency_penalty"),
    "logit_bias-word": (body(logit_bias={"hello": 5}), "logit_bias"),
    "logit_bias-high": (body(logit_bias={"5": 101}), "logit_bias"),
    "modalities-audio": (body(modalities=["text", "audio"]), "modalities"),
    "max_tokens-negative": (body(max_tokens=-1), "max_tokens"),
    "max_tokens-string": (body(max_tokens="64"), "max_tokens"),
    "max_tokens-float": (body(max_tokens=1.5), "max_tokens"),
    "max_tokens-bool": (body(max_tokens=True), "max_tokens"),
    "temperature-high": (body(temperature=2.5), "temperature"),
    "temperature-negative": (body(temperature=-0.1), "temperature"),
    "temperature-string": (body(temperature="hot"), "temperature"),
    "temperature-bool": (body(temperature=True), "temperature"),
    "top_p-high": (body(top_p=1.5), "top_p"),
    "top_p-negative": (body(top_p=-0.5), "top_p"),
    "top_p-string": (body(top_p="all"), "top_p"),
}


@pytest.mark.parametrize("request_body, field", list(REFUSALS.values()), ids=list(REFUSALS))
def test_a_bad_request_is_refused_naming_the_field(request_body, field):
    with pytest.raises(ParamError) as refused:
        read_request(request_body)
    assert field in str(refused.value)


@pytest.mark.parametrize("fields", [{"max_tokens": 0}, {"max_completion_tokens": 0, "max_tokens": 8},
                                    {"max_tokens": 10**30}, {"max_tokens": 32_769}])
def test_max_tokens_outside_one_to_the_cap_is_refused(fields):
    with pytest.raises(RequestError, match=f"{next(iter(fields))} must be a positive integer"):
        read_request(body(**fields))


def test_explicit_nulls_take_the_defaults():
    request = read_request(body(n=None, temperature=None, top_p=None, max_tokens=None))
    assert (request.temperature, request.top_p, request.max_tokens) == (1.0, 1.0, DEFAULT_MAX_TOKENS)


def test_a_good_request_is_read_with_defaults():
    request = read_request(body())
    assert request.model == "optimize/tiny-smollm2" and request.messages == USER and request.tools is None
    assert (request.max_tokens, request.temperature, request.top_p, request.stream) == (DEFAULT_MAX_TOKENS, 1.0,
                                                                                       1.0, False)


def test_max_completion_tokens_wins_over_max_tokens_and_sampling_is_kept():
    request = read_request(body(max_tokens=99, max_completion_tokens=12, temperature=0, top_p=0.5, stream=True))
    assert (request.max_tokens, request.temperature, request.top_p, request.stream) == (12, 0.0, 0.5, True)


def test_a_developer_message_is_read_as_a_system_message():
    request = read_request(body(messages=[{"role": "developer", "content": "Answer in French."}, *USER]))
    assert request.messages[0] == {"role": "system", "content": "Answer in French."}


def test_tool_choice_none_drops_the_tools():
    assert read_request(body(tools=TOOLS)).tools == TOOLS
    assert read_request(body(tools=TOOLS, tool_choice="none")).tools is None
    assert read_request(body(tools=TOOLS, tool_choice="auto")).tools == TOOLS


# --- the Completer on the SmolLM2 stand-in ---------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    pytest.importorskip("transformers")
    from transformers import GenerationConfig

    from optimize.catalog.standins import StandIn, build
    from optimize.chat.families import template_kwargs
    from optimize.chat.render import ChatRenderer

    path = tmp_path_factory.mktemp("standin") / "smollm2"
    build(StandIn("smollm2"), path)
    renderer = ChatRenderer.from_pretrained(str(path), template_kwargs("smollm2"))
    # the stop ids as ServingModel reads them: the generation config's eos ids, then the tokenizer's eos
    stops = GenerationConfig.from_pretrained(str(path)).eos_token_id
    stops = [stops] if isinstance(stops, int) else list(stops)
    if renderer.tokenizer.eos_token_id not in stops:
        stops.append(renderer.tokenizer.eos_token_id)
    return renderer, stops


class ScriptedEngine:
    """Hands over a fixed answer's token ids as `ServingModel.stream` does: up to `max_new_tokens`, ending after
    the first stop token; records what it was asked."""

    def __init__(self, ids: list[int], stop_ids: list[int]) -> None:
        self.ids = ids
        self.stop_ids = stop_ids
        self.asked: list[dict] = []

    def stream(self, adapter, prompt, max_new_tokens, temperature=0.0, top_p=1.0, seed=None, top_logprobs=None,
               shaping=None):
        self.asked.append({"adapter": adapter, "prompt": list(prompt), "max_new_tokens": max_new_tokens,
                           "temperature": temperature, "top_p": top_p, "seed": seed, "top_logprobs": top_logprobs,
                           "shaping": shaping})
        return self._steps(max_new_tokens, top_logprobs)

    def _steps(self, max_new_tokens, top_logprobs):
        steps = []
        for token in self.ids[:max_new_tokens]:
            steps.append(Step(token, -0.5, ((token, -0.5),) if top_logprobs else ()) if top_logprobs is not None
                         else Step(token))
            if token in self.stop_ids:
                break
        return ScriptedSteps(steps)


class ScriptedSteps:
    """The steps as `Steps.batches` hands them over to a reader slower than the batch: one, then two, then three
    at a time (a stream sends each batch as one chunk)."""

    def __init__(self, steps) -> None:
        self.steps = steps
        self.sequence = SimpleNamespace(cached=0)

    def batches(self):
        at, size = 0, 1
        while at < len(self.steps):
            yield self.steps[at:at + size]
            at, size = at + size, size + 1

    def close(self) -> None:
        pass


def completer_for(smollm2, answer: str, stop: bool = True, context_length: int | None = 4096):
    renderer, stops = smollm2
    ids = renderer.tokenizer(answer, add_special_tokens=False)["input_ids"] + ([stops[0]] if stop else [])
    engine = ScriptedEngine(ids, stops)
    return Completer(engine, renderer, "hermes", context_length), engine


def events(stream) -> list:
    """The stream's server-sent events: each `data:` payload, JSON-decoded, `[DONE]` kept as the string."""
    out = []
    for event in stream:
        assert event.startswith("data: ") and event.endswith("\n\n")
        payload = event[len("data: "):-2]
        out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def streamed_content(chunks: list) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c != "[DONE]")


def test_a_tool_call_answer_with_tools_offered_finishes_with_parsed_tool_calls(smollm2):
    completer, _ = completer_for(smollm2, CALLS_ANSWER)
    answer = completer.complete(None, read_request(body(tools=TOOLS)))
    choice = answer["choices"][0]
    assert answer["object"] == "chat.completion" and answer["id"].startswith("chatcmpl-")
    assert answer["model"] == "optimize/tiny-smollm2"
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["role"] == "assistant" and message["content"] == "Let me look that up."
    calls = message["tool_calls"]
    assert [(c["type"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("function", "get_weather", {"city": "Paris, France"}), ("function", "get_time", {"zone": "CET"})]
    assert len({c["id"] for c in calls}) == 2


def test_the_prompt_the_engine_gets_carries_the_offered_tools(smollm2):
    renderer, _ = smollm2
    completer, engine = completer_for(smollm2, CALLS_ANSWER)
    request = read_request(body(tools=TOOLS, temperature=0.3, top_p=0.9))
    answer = completer.complete("acme/helper:v2", request)
    asked = engine.asked[0]
    expected = renderer.tokenizer(renderer.text(request.messages, TOOLS, generation_prompt=True),
                                  add_special_tokens=False)["input_ids"]
    assert asked["prompt"] == expected and answer["usage"]["prompt_tokens"] == len(expected)
    prompt = renderer.tokenizer.decode(asked["prompt"])
    assert '"name": "get_weather"' in prompt and prompt.endswith("<|im_start|>assistant\n")
    assert (asked["adapter"], asked["temperature"], asked["top_p"]) == ("acme/helper:v2", 0.3, 0.9)


def test_the_same_answer_without_tools_offered_is_plain_content(smollm2):
    completer, engine = completer_for(smollm2, CALLS_ANSWER)
    for request in (read_request(body()), read_request(body(tools=TOOLS, tool_choice="none"))):
        answer = completer.complete(None, request)
        choice = answer["choices"][0]
        assert choice["finish_reason"] == "stop" and "tool_calls" not in choice["message"]
        assert choice["message"]["content"].startswith("Let me look that up.")
        assert '"name": "get_weather"' in choice["message"]["content"]
    assert all("get_weather" not in completer.renderer.tokenizer.decode(a["prompt"]) for a in engine.asked)


def test_a_call_that_cannot_be_read_stays_content(smollm2):
    completer, _ = completer_for(smollm2, 'Trying.\n<tool_call>{"name": "get_weather", "arguments": {"city": }'
                                          '</tool_call>')
    choice = completer.complete(None, read_request(body(tools=TOOLS)))["choices"][0]
    assert choice["finish_reason"] == "stop" and "tool_calls" not in choice["message"]
    assert choice["message"]["content"].startswith("Trying.")
    assert '"city": }' in choice["message"]["content"]


def test_usage_counts_the_stop_token_and_the_answer_ends_at_it(smollm2):
    renderer, _ = smollm2
    completer, engine = completer_for(smollm2, TEXT_ANSWER)
    answer = completer.complete(None, read_request(body()))
    answered = len(renderer.tokenizer(TEXT_ANSWER, add_special_tokens=False)["input_ids"]) + 1
    assert answer["choices"][0]["message"]["content"] == TEXT_ANSWER
    assert answer["choices"][0]["finish_reason"] == "stop"
    assert answer["usage"] == {"prompt_tokens": len(engine.asked[0]["prompt"]), "completion_tokens": answered,
                               "total_tokens": len(engine.asked[0]["prompt"]) + answered,
                               "prompt_tokens_details": {"cached_tokens": 0}}


def test_an_answer_cut_at_max_tokens_finishes_with_length(smollm2):
    completer, engine = completer_for(smollm2, TEXT_ANSWER)
    answer = completer.complete(None, read_request(body(max_tokens=5)))
    assert engine.asked[0]["max_new_tokens"] == 5
    assert answer["choices"][0]["finish_reason"] == "length" and answer["usage"]["completion_tokens"] == 5


def test_a_tool_call_answer_cut_at_max_tokens_finishes_with_length(smollm2):
    renderer, _ = smollm2
    cut = len(renderer.tokenizer(CALLS_ANSWER, add_special_tokens=False)["input_ids"]) - 6  # inside call two
    completer, _ = completer_for(smollm2, CALLS_ANSWER, stop=False)
    answer = completer.complete(None, read_request(body(tools=TOOLS, max_tokens=cut)))
    assert answer["choices"][0]["finish_reason"] == "length"


def test_the_token_limit_is_what_the_context_leaves(smollm2):
    completer, engine = completer_for(smollm2, TEXT_ANSWER, context_length=None)
    completer.complete(None, read_request(body(max_tokens=100)))
    prompt = len(engine.asked[0]["prompt"])
    completer.context_length = prompt + 7
    completer.complete(None, read_request(body(max_tokens=100)))
    assert [a["max_new_tokens"] for a in engine.asked] == [100, 7]


def test_a_prompt_as_long_as_the_context_is_refused_before_any_generation(smollm2):
    completer, engine = completer_for(smollm2, TEXT_ANSWER, context_length=8)
    for answer in (completer.complete, completer.chunks):  # a stream is refused before it starts
        with pytest.raises(RequestError, match=r"the prompt is \d+ tokens, and the model's context is 8"):
            answer(None, read_request(body()))
    assert engine.asked == []


# --- streaming -------------------------------------------------------------------------------------------


def test_streamed_text_concatenates_to_the_complete_content_and_ends_with_usage_then_done(smollm2):
    completer, _ = completer_for(smollm2, TEXT_ANSWER)
    whole = completer.complete(None, read_request(body()))
    plain = events(completer.chunks(None, read_request(body(stream=True))))
    assert not any("usage" in c for c in plain[:-1])  # as OpenAI: usage only when stream_options asks for it
    chunks = events(completer.chunks(None, read_request(body(stream=True, stream_options={"include_usage": True}))))
    usage = chunks.pop(-2)
    assert usage["choices"] == [] and usage["usage"] == whole["usage"] and usage["id"] == chunks[0]["id"]
    assert chunks[-1] == "[DONE]" and "[DONE]" not in chunks[:-1]
    chunks = chunks[:-1]
    assert len(chunks) > 3  # text arrives as it is decoded, not in one piece
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"} and len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert streamed_content(chunks) == whole["choices"][0]["message"]["content"] == TEXT_ANSWER
    assert all("\ufffd" not in (c["choices"][0]["delta"].get("content") or "") for c in chunks)
    assert all(c["choices"][0]["finish_reason"] is None and "usage" not in c for c in chunks[:-1])
    last = chunks[-1]
    assert last["choices"][0]["delta"] == {} and last["choices"][0]["finish_reason"] == "stop"


def test_a_stream_cut_at_max_tokens_finishes_with_length(smollm2):
    completer, _ = completer_for(smollm2, TEXT_ANSWER)
    chunks = events(completer.chunks(None, read_request(body(max_tokens=4, stream=True,
                                                             stream_options={"include_usage": True}))))
    assert chunks[-3]["choices"][0]["finish_reason"] == "length"
    assert chunks[-2]["usage"]["completion_tokens"] == 4


def test_streamed_text_matches_the_complete_content_around_whitespace(smollm2):
    completer, _ = completer_for(smollm2, "\nSunny, 21 degrees.\n")
    whole = completer.complete(None, read_request(body()))
    chunks = events(completer.chunks(None, read_request(body(stream=True))))
    assert streamed_content(chunks) == whole["choices"][0]["message"]["content"]


def test_a_stream_with_tools_carries_tool_call_deltas_with_an_index(smollm2):
    completer, _ = completer_for(smollm2, CALLS_ANSWER)
    whole = completer.complete(None, read_request(body(tools=TOOLS)))
    chunks = events(completer.chunks(None, read_request(body(tools=TOOLS, stream=True,
                                                             stream_options={"include_usage": True}))))
    assert chunks[-1] == "[DONE]" and chunks[-2]["usage"] == whole["usage"]
    chunks = chunks[:-2]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert streamed_content(chunks) == whole["choices"][0]["message"]["content"] == "Let me look that up."
    deltas = [call for c in chunks for call in c["choices"][0]["delta"].get("tool_calls", [])]
    assert [d["index"] for d in deltas] == [0, 1]
    assert [(d["type"], d["function"]["name"], json.loads(d["function"]["arguments"])) for d in deltas] == [
        ("function", "get_weather", {"city": "Paris, France"}), ("function", "get_time", {"zone": "CET"})]
    assert len({d["id"] for d in deltas}) == 2
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_a_stream_with_tools_and_a_text_answer_streams_the_text(smollm2):
    completer, _ = completer_for(smollm2, TEXT_ANSWER)
    chunks = events(completer.chunks(None, read_request(body(tools=TOOLS, stream=True))))[:-1]
    assert streamed_content(chunks) == TEXT_ANSWER
    assert not any("tool_calls" in c["choices"][0]["delta"] for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


# --- parameters honoured or refused, never ignored -------------------------------------------------------

UNSUPPORTED = {  # id: (fields, the param named)
    "json_schema-without-schema": ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
                                   "response_format"),
    "parallel_tool_calls-string": ({"parallel_tool_calls": "no"}, "parallel_tool_calls"),
    "store": ({"store": True}, "store"),
    "unknown": ({"guided_json": {}}, "guided_json"),
    "stop-empty": ({"stop": ""}, "stop"),
    "stop-empty-string-in-list": ({"stop": ["END", ""]}, "stop"),
    "stop-five": ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    "stop-number": ({"stop": [1]}, "stop"),
    "seed-float": ({"seed": 1.5}, "seed"),
    "logprobs-string": ({"logprobs": "yes"}, "logprobs"),
    "top_logprobs-alone": ({"top_logprobs": 2}, "top_logprobs"),
    "top_logprobs-many": ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    "stream_options": ({"stream_options": {"continuous_usage_stats": True}}, "stream_options"),
}


@pytest.mark.parametrize("fields, param", list(UNSUPPORTED.values()), ids=list(UNSUPPORTED))
def test_what_the_engine_cannot_do_is_refused_naming_the_parameter(fields, param):
    with pytest.raises(ParamError) as refused:
        read_request(body(**fields))
    assert refused.value.param == param and param in str(refused.value)


def test_sampling_extras_and_harmless_openai_fields_are_read():
    request = read_request(body(top_k=5, min_p=0.1, repetition_penalty=1.2, presence_penalty=0.5,
                                frequency_penalty=-1, logit_bias={"50": 10, "7": -100}, n=3, service_tier="auto",
                                prompt_cache_key="k", safety_identifier="s", reasoning_effort="low",
                                modalities=["text"]))
    shaping = request.shaping
    assert (shaping.top_k, shaping.min_p, shaping.repetition_penalty, shaping.presence_penalty,
            shaping.frequency_penalty, shaping.logit_bias, request.n) == (
        5, 0.1, 1.2, 0.5, -1.0, {50: 10.0, 7: -100.0}, 3)
    assert not read_request(body(top_k=-1, frequency_penalty=0)).shaping.shapes


def test_accepted_parameters_are_read():
    request = read_request(body(stop="END", seed=-3, logprobs=True, top_logprobs=3, response_format={"type": "text"},
                                user="u1", tool_choice="auto", tools=TOOLS, stream_options={"include_usage": True}))
    assert request.stop == ("END",) and request.seed == 2**63 - 3 and request.top_logprobs == 3
    assert read_request(body(logprobs=True)).top_logprobs == 0 and read_request(body()).top_logprobs is None
    assert read_request(body(stop=[])).stop == ()  # what harnesses send when they have no stop string


def test_a_stop_string_cuts_the_answer_whole_and_streamed(smollm2):
    completer, engine = completer_for(smollm2, "Rain today. END of the forecast", stop=False)
    request = read_request(body(stop=["END", "never"], seed=4))
    answer = completer.complete(None, request)
    assert answer["choices"][0]["message"]["content"] == "Rain today. "
    assert answer["choices"][0]["finish_reason"] == "stop" and engine.asked[-1]["seed"] == 4
    chunks = events(completer.chunks(None, read_request(body(stop="END", stream=True))))
    assert streamed_content(chunks) == "Rain today. " and "END" not in json.dumps(chunks)
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert answer["usage"]["completion_tokens"] < len(smollm2[0].tokenizer("Rain today. END of the forecast")[
        "input_ids"])  # generation stopped at the stop string


def test_log_probabilities_come_back_per_token(smollm2):
    completer, engine = completer_for(smollm2, "Sunny.")
    answer = completer.complete(None, read_request(body(logprobs=True, top_logprobs=1)))
    content = answer["choices"][0]["logprobs"]["content"]
    assert engine.asked[-1]["top_logprobs"] == 1
    assert "".join(item["token"] for item in content[:-1]) == "Sunny."  # the stop token last
    assert all(item["logprob"] == -0.5 and item["bytes"] == list(item["token"].encode())
               and len(item["top_logprobs"]) == 1 for item in content)
    chunks = events(completer.chunks(None, read_request(body(logprobs=True, stream=True))))
    assert any(c["choices"][0]["logprobs"] for c in chunks if c != "[DONE]")


# --- legacy text completions ---------------------------------------------------------------------------


def test_text_completion_requests_are_read_or_refused_naming_the_parameter():
    from optimize.serving.text_completions import read_text_request

    request = read_text_request({"model": "m", "prompt": ["The sky is"], "max_tokens": 0, "echo": True,
                                 "logprobs": 1, "temperature": 0})
    assert (request.prompts, request.max_tokens, request.echo, request.logprobs) == (("The sky is",), 0, True, 1)
    assert read_text_request({"model": "m", "prompt": ["a", [1, 2]]}).prompts == ("a", [1, 2])  # a batch
    for fields, param in (({"prompt": ""}, "prompt"), ({"prompt": ["a", ""]}, "prompt"),
                          ({"prompt": ["a"] * 65}, "prompt"), ({"prompt": ["a", "b"], "stream": True}, "stream"),
                          ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
                          ({"prompt": "x", "suffix": "y"}, "suffix"), ({"prompt": "x", "best_of": 2}, "best_of"),
                          ({"prompt": "x", "logprobs": 9}, "logprobs"), ({"prompt": "x", "echo": 1}, "echo"),
                          ({"prompt": "x", "stream": True, "echo": True}, "stream"), ({"prompt": "x", "n": 3}, "n"),
                          ({"prompt": "x", "messages": []}, "messages")):
        with pytest.raises(ParamError) as refused:
            read_text_request({"model": "m", **fields})
        assert refused.value.param == param


def test_an_echoed_prompt_comes_back_with_each_token_s_log_probability(smollm2):
    from optimize.serving.text_completions import TextCompleter, read_text_request

    renderer, stops = smollm2
    _, engine = completer_for(smollm2, " blue.")
    engine.score = lambda adapter, ids, top: [Step(t, -1.0, ((t, -1.0),) if top else ()) for t in ids[1:]]
    texts = TextCompleter(engine, renderer.tokenizer, 4096)
    scored = texts.complete(None, read_text_request({"model": "m", "prompt": "The sky is", "max_tokens": 0,
                                                     "echo": True, "logprobs": 1}))
    choice = scored["choices"][0]
    prompt_ids = renderer.tokenizer("The sky is")["input_ids"]
    assert choice["text"] == renderer.tokenizer.decode(prompt_ids) and scored["usage"]["completion_tokens"] == 0
    logprobs = choice["logprobs"]
    assert len(logprobs["tokens"]) == len(prompt_ids) and logprobs["token_logprobs"][0] is None
    assert logprobs["token_logprobs"][1:] == [-1.0] * (len(prompt_ids) - 1)
    assert logprobs["text_offset"][0] == 0 and logprobs["top_logprobs"][0] is None
    continued = texts.complete(None, read_text_request({"model": "m", "prompt": "The sky is", "max_tokens": 8,
                                                        "stop": "."}))
    assert continued["choices"][0]["text"] == " blue" and continued["choices"][0]["finish_reason"] == "stop"
    chunks = events(texts.chunks(None, read_text_request({"model": "m", "prompt": "The sky is", "stream": True})))
    assert "".join(c["choices"][0]["text"] for c in chunks if c != "[DONE]") == " blue."


def test_several_prompts_are_answered_as_one_choice_each(smollm2):
    from optimize.serving.text_completions import TextCompleter, read_text_request

    renderer, _ = smollm2
    _, engine = completer_for(smollm2, " blue.")
    texts = TextCompleter(engine, renderer.tokenizer, 4096)
    answer = texts.complete(None, read_text_request({"model": "m", "prompt": ["The sky is", "The sea is"],
                                                     "max_tokens": 8}))
    assert [c["index"] for c in answer["choices"]] == [0, 1] and len(engine.asked) == 2
    assert all(c["text"] == " blue." and "_generated" not in c for c in answer["choices"])
    assert answer["usage"]["prompt_tokens"] == sum(len(a["prompt"]) for a in engine.asked)


def test_n_choices_are_asked_together_each_seeded_and_counted_in_the_usage(smollm2):
    completer, engine = completer_for(smollm2, "Sunny.")
    answer = completer.complete(None, read_request(body(n=3, seed=7, temperature=0.8, presence_penalty=1)))
    assert [c["index"] for c in answer["choices"]] == [0, 1, 2]
    assert all(c["message"]["content"] == "Sunny." for c in answer["choices"])
    assert [asked["seed"] for asked in engine.asked] == [7, 8, 9]
    assert all(asked["shaping"].presence_penalty == 1 for asked in engine.asked)
    one = len(smollm2[0].tokenizer("Sunny.", add_special_tokens=False)["input_ids"]) + 1
    assert answer["usage"]["completion_tokens"] == 3 * one


def test_n_streamed_choices_interleave_each_by_its_index_and_finish_on_its_own(smollm2):
    completer, engine = completer_for(smollm2, TEXT_ANSWER)
    whole = completer.complete(None, read_request(body(n=3, seed=4)))
    chunks = events(completer.chunks(None, read_request(body(n=3, seed=4, stream=True,
                                                              stream_options={"include_usage": True}))))
    assert [asked["seed"] for asked in engine.asked[3:]] == [4, 5, 6]
    assert chunks[-1] == "[DONE]" and chunks[-2]["usage"] == whole["usage"]
    chunks = chunks[:-2]
    assert all(len(c["choices"]) == 1 for c in chunks)
    indexes = [c["choices"][0]["index"] for c in chunks]
    assert indexes[:3] == [0, 1, 2] and indexes[3:6] == [0, 1, 2]  # roles first, then each choice in turn
    for index in range(3):
        mine = [c for c in chunks if c["choices"][0]["index"] == index]
        assert mine[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        assert streamed_content(mine) == whole["choices"][index]["message"]["content"] == TEXT_ANSWER
        assert [c["choices"][0]["finish_reason"] for c in mine].count("stop") == 1
        assert mine[-1]["choices"][0]["finish_reason"] == "stop"


def test_a_bias_for_a_token_the_model_lacks_is_refused_naming_logit_bias(smollm2):
    completer, _ = completer_for(smollm2, "Sunny.")
    with pytest.raises(ParamError) as refused:
        completer.complete(None, read_request(body(logit_bias={"999999": 5})))
    assert refused.value.param == "logit_bias" and "outside the model's vocabulary" in str(refused.value)


@pytest.mark.parametrize(("fields", "param"), [
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"tools": TOOLS, "tool_choice": "required"}, "tool_choice"),
])
def test_an_engine_without_constrained_decoding_refuses_structured_outputs(smollm2, fields, param):
    completer, _ = completer_for(smollm2, "Sunny.")  # an engine that does not say it constrains (as vLLM's here)
    with pytest.raises(ParamError) as refused:
        completer.complete(None, read_request(body(**fields)))
    assert refused.value.param == param and "has no constrained decoding" in str(refused.value)


def test_a_trained_model_s_instructions_answer_a_request_without_a_system_message(smollm2):
    completer, engine = completer_for(smollm2, "Sunny.")
    completer.instructions["acme/helper:v2"] = "Answer in one word."
    renderer = smollm2[0]
    completer.complete("acme/helper:v2", read_request(body()))
    assert "Answer in one word." in renderer.tokenizer.decode(engine.asked[-1]["prompt"])
    for fields in ({"trained_instructions": False},
                   {"messages": [{"role": "system", "content": "Be loud."}, {"role": "user", "content": "hi"}]}):
        completer.complete("acme/helper:v2", read_request(body(**fields)))
        assert "Answer in one word." not in renderer.tokenizer.decode(engine.asked[-1]["prompt"]), fields
    completer.complete(None, read_request(body()))  # the base model has none
    assert "Answer in one word." not in renderer.tokenizer.decode(engine.asked[-1]["prompt"])
    with pytest.raises(ParamError) as refused:
        read_request(body(trained_instructions="no"))
    assert refused.value.param == "trained_instructions"


def test_parallel_tool_calls_false_keeps_the_first_call(smollm2):
    completer, _ = completer_for(smollm2, CALLS_ANSWER)
    answer = completer.complete(None, read_request(body(tools=TOOLS, parallel_tool_calls=False)))
    [call] = answer["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather" and answer["choices"][0]["finish_reason"] == "tool_calls"
