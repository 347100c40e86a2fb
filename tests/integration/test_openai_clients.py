"""Third-party clients that speak the OpenAI API work unchanged against an endpoint (the tiny Llama stand-in):

- the official `openai` package's AsyncOpenAI: concurrent chat completions, some streamed, each answered as when it
  is asked alone (greedy and seeded answers alike); models listed; a bad token refused as AuthenticationError;
- EleutherAI's evaluation harness `lm-eval`, through its OpenAI-compatible model classes and no task or dataset:
  `LocalCompletionsAPI.loglikelihood` (echoed prompts' log-probabilities over `requests` and, concurrently, over
  `aiohttp`; string prompts and token-id prompts; the tokenizer it counts context tokens with is the stand-in's
  own, read from disk, so nothing is downloaded) and `LocalChatCompletion.generate_until` (answers cut at its
  `until` stop strings by the server);
- httpx as a curl-like client: a streamed chat completion and a streamed text completion read line by line as
  server-sent events, ending with `data: [DONE]`;
- the `openai` client's `chat.completions.parse` with a pydantic model, a forced tool call and several choices (whole
  and streamed), and
  its `responses.create` (whole, streamed, and going on from a previous response); LangChain's
  `with_structured_output` (json_schema and function calling);
- and what a client may send that no model can answer — a bare NaN or Infinity in the body, a token id outside the
  vocabulary — is refused in OpenAI's error shape naming the field, never a 5xx, while a one-token prompt (with
  `echo` and `logprobs` or without) is answered.
"""

from __future__ import annotations

import asyncio
import json
import math

import pytest

from tests.conftest import built_standin
from tests.endpoint_fixtures import server_with_endpoint

pytestmark = pytest.mark.integration
MODEL = "optimize/tiny-llama-3.2"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with server_with_endpoint(tmp_path_factory.mktemp("clients"), MODEL, "clients") as (proc, client, _):
        yield proc, client


def _ask(index: int) -> dict:
    """The i-th request of the concurrent batch: the first two greedy, the others sampled with a seed of their own
    (so that their answers differ, and one mixed up with another would show)."""
    return {"model": MODEL, "messages": [{"role": "user", "content": f"Question {index}: what is {index} plus 2?"}],
            "max_tokens": 16, **({"temperature": 0} if index < 2 else {"temperature": 1.0, "seed": index})}


def test_async_openai_answers_concurrent_requests_as_it_answers_each_alone(served):
    from openai import AsyncOpenAI, AuthenticationError

    proc, _ = served

    async def answer(openai: AsyncOpenAI, request: dict, stream: bool) -> tuple[str, str]:
        if not stream:
            whole = await openai.chat.completions.create(**request)
            return whole.choices[0].message.content, whole.choices[0].finish_reason
        parts, finish = [], None
        async for chunk in await openai.chat.completions.create(**request, stream=True):
            for choice in chunk.choices:
                parts.append(choice.delta.content or "")
                finish = choice.finish_reason or finish
        return "".join(parts), finish

    async def main() -> None:
        async with AsyncOpenAI(base_url=f"{proc.url}/v1", api_key=proc.token, max_retries=0) as openai:
            assert MODEL in [model.id async for model in openai.models.list()]
            together = await asyncio.gather(*(answer(openai, _ask(i), stream=i % 2 == 1) for i in range(8)))
            for i, (text, finish) in enumerate(together):
                assert text and finish in ("stop", "length"), (i, text, finish)
                assert (text, finish) == await answer(openai, _ask(i), stream=False), i  # the same, asked alone
            assert len({text for text, _ in together[2:]}) > 1  # the seeded answers differ: none was mixed up
        async with AsyncOpenAI(base_url=f"{proc.url}/v1", api_key="not-a-token", max_retries=0) as stranger:
            with pytest.raises(AuthenticationError) as refused:
                await stranger.chat.completions.create(**_ask(0))
            assert "not valid" in refused.value.message

    asyncio.run(main())


@pytest.fixture
def lm_eval_env(served, monkeypatch):
    """lm-eval's local OpenAI-compatible classes read the API key from OPENAI_API_KEY."""
    pytest.importorskip("lm_eval")
    proc, _ = served
    monkeypatch.setenv("OPENAI_API_KEY", proc.token)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return proc


@pytest.mark.parametrize("tokenized", [False, True], ids=["text-prompts", "token-prompts"])
def test_lm_eval_computes_log_likelihoods_from_echoed_prompts(served, lm_eval_env, tokenized):
    from lm_eval.api.instance import Instance
    from lm_eval.models.openai_completions import LocalCompletionsAPI
    from openai import OpenAI

    proc, _ = served
    openai = OpenAI(base_url=f"{proc.url}/v1", api_key=proc.token, max_retries=0)
    context = "The cat sat on the"
    greedy = openai.completions.create(model=MODEL, prompt=context, max_tokens=3, temperature=0).choices[0].text
    pairs = [(context, greedy), (context, " mat"), ("Paris is the capital of", " France and Italy"),
             ("One, two,", " three")]
    requests = [Instance("loglikelihood", {}, pair, i) for i, pair in enumerate(pairs)]

    lm = LocalCompletionsAPI(base_url=f"{proc.url}/v1/completions", model=MODEL, tokenizer_backend="huggingface",
                             tokenizer=str(built_standin(MODEL)), tokenized_requests=tokenized, max_retries=1)
    answers = lm.loglikelihood(requests)
    concurrent = LocalCompletionsAPI(base_url=f"{proc.url}/v1/completions", model=MODEL, num_concurrent=3,
                                     tokenizer_backend="huggingface", tokenizer=str(built_standin(MODEL)),
                                     tokenized_requests=tokenized, max_retries=1).loglikelihood(requests)
    # its batches: several prompts in one request, one choice each
    batched = LocalCompletionsAPI(base_url=f"{proc.url}/v1/completions", model=MODEL, batch_size=4,
                                  tokenizer_backend="huggingface", tokenizer=str(built_standin(MODEL)),
                                  tokenized_requests=tokenized, max_retries=1).loglikelihood(requests)
    assert [b[0] for b in batched] == pytest.approx([a[0] for a in answers], abs=1e-4)
    assert len(answers) == len(pairs)
    for (prefix, continuation), (loglikelihood, is_greedy), (again, greedy_again) in zip(
            pairs, answers, concurrent, strict=True):
        assert math.isfinite(loglikelihood) and loglikelihood < 0 and isinstance(is_greedy, bool)
        assert again == pytest.approx(loglikelihood, abs=1e-4) and greedy_again == is_greedy
        # what lm-eval computed: the continuation's tokens' log-probabilities in the echoed prompt
        echoed = openai.completions.create(model=MODEL, prompt=prefix + continuation, max_tokens=0, echo=True,
                                           logprobs=1).choices[0].logprobs
        expected = sum(lp for lp, offset in zip(echoed.token_logprobs, echoed.text_offset, strict=True)
                       if offset >= len(prefix))
        assert loglikelihood == pytest.approx(expected, abs=1e-3), (prefix, continuation)
    assert answers[0][1] is True  # the greedy continuation is the greedy one


def test_lm_eval_generations_are_cut_at_its_stop_strings(served, lm_eval_env):
    from lm_eval.api.instance import Instance
    from lm_eval.models.api_models import JsonChatStr
    from lm_eval.models.openai_completions import LocalChatCompletion

    proc, _ = served
    lm = LocalChatCompletion(base_url=f"{proc.url}/v1/chat/completions", model=MODEL, max_retries=1)
    chat = JsonChatStr(json.dumps([{"role": "user", "content": "Tell me a story."}]))

    def generate(*until: str) -> list[str]:  # sampled: lm-eval sends its seed (1234) with every request
        return lm.generate_until([Instance("generate_until", {}, (chat, {"until": [stop], "max_gen_toks": 16,
                                                                         "temperature": 1.0}), i)
                                  for i, stop in enumerate(until)])

    [whole] = generate("\x1e")  # a stop string the answer does not hold
    assert whole
    stop = next((whole[i:i + 2] for i in [*range(len(whole) // 2, len(whole) - 1), *range(1, len(whole) // 2)]
                 if whole[i:i + 2].isascii() and whole[i:i + 2].isalnum()), None)  # from the answer's second half
    if stop is None:
        pytest.skip(f"no stop string to cut this answer at: {whole!r}")
    cut, uncut = generate(stop, "\x1e")
    assert cut == whole[:whole.index(stop)] and uncut == whole


def test_httpx_reads_streams_as_server_sent_events_ending_with_done(served):
    proc, client = served
    ask = _ask(3)
    whole = client.post("/v1/chat/completions", json=ask).json()["choices"][0]["message"]["content"]
    for path, body in (("/v1/chat/completions", {**ask, "stream": True}),
                       ("/v1/completions", {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 8,
                                            "temperature": 0, "stream": True})):  # greedy: it runs to max_tokens
        with client.stream("POST", path, json=body) as stream:
            assert stream.status_code == 200 and stream.headers["content-type"].startswith("text/event-stream")
            events = [line for line in stream.iter_lines() if line]
        assert all(line.startswith("data: ") for line in events) and events[-1] == "data: [DONE]", events
        chunks = [json.loads(line.removeprefix("data: ")) for line in events[:-1]]
        assert len({chunk["id"] for chunk in chunks}) == 1 and chunks[-1]["choices"][0]["finish_reason"] == "length"
        if path == "/v1/chat/completions":
            assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
            assert "".join(chunk["choices"][0]["delta"].get("content") or "" for chunk in chunks) == whole
        else:
            assert {chunk["object"] for chunk in chunks} == {"text_completion"}
            assert "".join(chunk["choices"][0]["text"] for chunk in chunks)


@pytest.mark.parametrize("field, literal", [("temperature", "NaN"), ("temperature", "1e999"),
                                            ("notAField", "-1E+400"), ("notAField", "9" * 400 + ".0")])
def test_nan_in_a_body_is_refused_naming_the_field_on_every_chat_route(served, field, literal):
    """A bare NaN, or a number too large for a float (which Python reads as infinity), in a field the route reads
    or in one it passes on to the endpoint unread."""
    proc, client = served
    endpoint = client.get("/v1/training/endpoints").json()["endpoints"][0]["endpointId"]
    raw = json.dumps({**_ask(0), field: "LITERAL"}).replace('"LITERAL"', literal).encode()
    shown = literal if len(literal) <= 40 else f"{literal[:40]}…"
    for path in ("/v1/chat/completions", f"/v1/training/endpoints/{endpoint}/chat/completions", "/v1/completions",
                 f"/v1/training/endpoints/{endpoint}/completions"):
        for media in ("application/json", "text/plain"):  # text/plain: read by the route itself
            answer = client.post(path, content=raw, headers={"content-type": media})
            assert answer.status_code == 422, (path, media, answer.text)
            assert answer.json()["error"]["message"] == (f"field {field} is {shown}, not a finite number (send a "
                                                         "finite number in its place: JSON has no NaN or Infinity)")


@pytest.mark.parametrize("extra", [{}, {"logprobs": 2}, {"echo": True, "logprobs": 1}, {"echo": True, "logprobs": 0}])
def test_a_one_token_prompt_is_answered_with_echo_and_logprobs_or_without(served, extra):
    _, client = served
    for prompt in ([5], "a"):
        answer = client.post("/v1/completions", json={"model": MODEL, "prompt": prompt, "max_tokens": 2,
                                                      "temperature": 0, **extra})
        assert answer.status_code == 200, (prompt, answer.text)
        choice = answer.json()["choices"][0]
        if extra.get("logprobs") is not None:  # the echoed prompt's tokens, then the generated ones
            usage = answer.json()["usage"]
            assert len(choice["logprobs"]["tokens"]) == usage["completion_tokens"] + (
                usage["prompt_tokens"] if extra.get("echo") else 0)


@pytest.mark.parametrize("prompt", [[10**9], [1, 2**40], [[5], [128_256]]])
def test_a_token_id_outside_the_vocabulary_is_refused_naming_the_prompt(served, prompt):
    _, client = served
    for extra in ({"max_tokens": 2}, {"max_tokens": 0, "echo": True, "logprobs": 1}):
        answer = client.post("/v1/completions", json={"model": MODEL, "prompt": prompt, **extra})
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["param"] == "prompt"
        assert "outside the model's vocabulary; token ids go from 0 to" in error["message"]


def test_a_reader_asks_an_endpoint_for_text_completions_as_for_chat_and_reads_openai_errors(served):
    """An endpoint's own `completions` is an OpenAI route like its `chat/completions`: a reader's token may use it
    (OpenAI clients only talk to models) and its refusals carry OpenAI's error object."""
    proc, client = served
    endpoint = client.get("/v1/training/endpoints").json()["endpoints"][0]["endpointId"]
    issued = client.post("/v1/auth/tokens", json={"name": "text-reader", "role": "reader"})
    assert issued.status_code == 201, issued.text
    reader = {"Authorization": f"Bearer {issued.json()['token']}"}
    for route, body in (("completions", {"prompt": "a", "max_tokens": 1}),
                        ("chat/completions", {"messages": [{"role": "user", "content": "a"}], "max_tokens": 1})):
        path = f"/v1/training/endpoints/{endpoint}/{route}"
        answer = client.post(path, json=body, headers=reader)
        assert answer.status_code == 200, (path, answer.text)
        refused = client.post(path, json={**body, "max_tokens": -1}, headers=reader)
        assert refused.status_code in (400, 422), (path, refused.text)
        assert refused.json()["error"]["param"] == "max_tokens", (path, refused.text)


def test_openai_parse_reads_structured_answers_and_forced_calls_through_the_server(served):
    """`chat.completions.parse` with a pydantic model (response_format json_schema, strict), a forced tool call in
    the model's own format (Llama 3.2: llama3_json), and several choices of one request."""
    from typing import Literal

    from openai import OpenAI
    from pydantic import BaseModel, ConfigDict

    class Triage(BaseModel):
        model_config = ConfigDict(extra="forbid")
        label: Literal["billing", "bug", "other"]
        urgent: bool

    proc, _ = served
    openai = OpenAI(base_url=f"{proc.url}/v1", api_key=proc.token, max_retries=0)
    asked = [{"role": "user", "content": "Triage: my invoice is wrong"}]
    parsed = openai.chat.completions.parse(model=MODEL, messages=asked, response_format=Triage, n=4, temperature=1.0,
                                           seed=3, max_tokens=64)
    assert len(parsed.choices) == 4
    assert all(isinstance(choice.message.parsed, Triage) for choice in parsed.choices)
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"days": {"enum": [1, 2, 3]}}, "required": ["days"],
        "additionalProperties": False}}}
    called = openai.chat.completions.create(model=MODEL, messages=asked, tools=[weather], max_tokens=64,
                                            tool_choice={"type": "function", "function": {"name": "get_weather"}})
    [call] = called.choices[0].message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments)["days"] in (1, 2, 3)
    assert called.choices[0].finish_reason == "tool_calls"


def test_the_openai_client_streams_several_choices_each_by_its_index(served):
    from openai import OpenAI

    proc, _ = served
    openai = OpenAI(base_url=f"{proc.url}/v1", api_key=proc.token, max_retries=0)
    asked = {"model": MODEL, "messages": [{"role": "user", "content": "Name a colour."}], "n": 3, "seed": 5,
             "temperature": 1.0, "max_tokens": 12}
    whole = openai.chat.completions.create(**asked)
    texts, finishes = {0: "", 1: "", 2: ""}, {}
    for chunk in openai.chat.completions.create(**asked, stream=True):
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            if choice.finish_reason:
                finishes[choice.index] = choice.finish_reason
    assert texts == {choice.index: choice.message.content for choice in whole.choices}  # seeded: the same answers
    assert finishes == {choice.index: choice.finish_reason for choice in whole.choices}


def test_the_openai_client_s_responses_create_whole_streamed_and_continued(served):
    from openai import NotFoundError, OpenAI

    proc, _ = served
    openai = OpenAI(base_url=f"{proc.url}/v1", api_key=proc.token, max_retries=0)
    first = openai.responses.create(model=MODEL, input="What is 2 plus 2?", instructions="Answer briefly.",
                                    max_output_tokens=8, temperature=0)
    assert first.id.startswith("resp_") and first.output_text and first.usage.output_tokens <= 8
    following = openai.responses.create(model=MODEL, input="And 3 plus 3?", previous_response_id=first.id,
                                        max_output_tokens=8, temperature=0)
    assert following.usage.input_tokens > first.usage.input_tokens  # the earlier turn came along
    events = list(openai.responses.create(model=MODEL, input="What is 2 plus 2?", max_output_tokens=8,
                                          temperature=0, stream=True))
    assert events[0].type == "response.created" and events[-1].type in ("response.completed", "response.incomplete")
    streamed = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert streamed == events[-1].response.output_text
    with pytest.raises(NotFoundError):
        openai.responses.create(model=MODEL, input="x", previous_response_id="resp_unknown")


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_langchain_with_structured_output_reads_answers_of_its_schema(served, method):
    from typing import Literal

    from langchain_openai import ChatOpenAI
    from pydantic import BaseModel, ConfigDict

    class Triage(BaseModel):
        """A support ticket's triage."""

        model_config = ConfigDict(extra="forbid")
        label: Literal["billing", "bug", "other"]
        urgent: bool

    proc, _ = served
    chat = ChatOpenAI(model=MODEL, base_url=f"{proc.url}/v1", api_key=proc.token, max_retries=0, temperature=1.0,
                      max_tokens=400)  # the tiny vocabulary writes JSON a few characters a token
    structured = chat.with_structured_output(Triage, method=method)
    for _ in range(3):
        assert isinstance(structured.invoke("Triage: my invoice is wrong"), Triage)
