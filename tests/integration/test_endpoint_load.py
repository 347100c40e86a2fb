"""An endpoint under load, through the server and the official `openai` client: a full endpoint answers 429 with
Retry-After, a client that abandons its stream frees its row, a parameter the engine cannot honour is refused
naming it, `/v1/completions` echoes a prompt with each token's log-probability (what log-likelihood evaluation
reads), stop strings cut answers, seeds reproduce them, `GET /v1/models/{id}` finds a served model, and a route
the server does not have answers 404 in OpenAI's shape, max_tokens past the deployment's cap is refused, and
`GET /metrics` gives jobs, devices and the endpoint's load in Prometheus' format, an endpoint's own
`/completions` answers without a model named, and a repeated prompt reports its kept prefix as cached tokens.
The endpoint batches one request and queues none (OPTIMIZE_ENDPOINT_BATCH=1, OPTIMIZE_ENDPOINT_QUEUE=0), so a
second request finds it full."""

from __future__ import annotations

import time

import pytest

from tests.endpoint_fixtures import server_with_endpoint

pytestmark = pytest.mark.integration
MODEL = "optimize/tiny-llama-3.2"
ASK = [{"role": "user", "content": "Count to a thousand."}]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    env = {"OPTIMIZE_ENDPOINT_BATCH": "1", "OPTIMIZE_ENDPOINT_QUEUE": "0", "OPTIMIZE_ENDPOINT_MAX_TOKENS": "4000"}
    with server_with_endpoint(tmp_path_factory.mktemp("load"), MODEL, "load", env) as served:
        yield served


def test_a_full_endpoint_answers_429_and_an_abandoned_stream_frees_its_row(served):
    proc, client, endpoint = served
    with client.stream("POST", "/v1/chat/completions", json={"model": MODEL, "messages": ASK, "stream": True,
                                                            "max_tokens": 4000, "temperature": 0}) as stream:
        lines = stream.iter_lines()
        assert next(lines).startswith("data: ")  # the row is held, generating
        full = client.post("/v1/chat/completions", json={"model": MODEL, "messages": ASK, "max_tokens": 4})
        assert full.status_code == 429 and full.headers["retry-after"] == "1", full.text
        error = full.json()["error"]
        assert error["type"] == "rate_limit_error" and error["code"] == "queue_full" and "at capacity" in \
            error["message"]
    # the client went away: its row is freed long before 4000 tokens would have been generated
    deadline = time.monotonic() + 20
    while (answer := client.post("/v1/chat/completions", json={"model": MODEL, "messages": ASK,
                                                               "max_tokens": 4})).status_code == 429:
        assert time.monotonic() < deadline, "the abandoned stream kept its row"
        time.sleep(0.2)
    assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] == 4
    # the load its worker reports: the abandoned stream was cut short, far from its 4000 tokens
    deadline = time.monotonic() + 20
    while not ((load := client.get(f"/v1/training/endpoints/{endpoint}").json()["load"] or {}).get("served", 0) >= 2
               and load["inFlight"] == 0):
        assert time.monotonic() < deadline, f"the endpoint's load did not settle: {load}"
        time.sleep(0.2)
    assert load["queued"] == 0 and 4 < load["tokens"] < 2000, load
    assert load["tokensPerSecond"] > 0 and load["latencyP95Seconds"] >= load["latencyP50Seconds"] > 0


def test_endpoints_get_shows_the_load(served, capsys):
    from tests.conftest import Cli

    proc, client, endpoint = served
    client.post("/v1/chat/completions", json={"model": MODEL, "messages": ASK, "max_tokens": 3}).raise_for_status()
    deadline = time.monotonic() + 20
    while "Load        " not in (text := Cli(capsys, proc.url).ok("training", "endpoints", "get", endpoint).out):
        assert time.monotonic() < deadline, text
        time.sleep(0.2)
    line = next(line for line in text.splitlines() if line.startswith("Load"))
    assert " served, 0 in flight, 0 queued; last minute " in line and "tokens generated" in line, line


def test_the_openai_client_gets_what_it_asks_or_a_refusal_naming_the_parameter(served):
    from openai import BadRequestError, NotFoundError, OpenAI, RateLimitError

    proc, client, _ = served
    openai = OpenAI(base_url=f"{proc.url}/v1", api_key=proc.token, max_retries=0)
    with pytest.raises(BadRequestError) as refused:
        openai.chat.completions.create(model=MODEL, messages=ASK, response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "format": "postcode"}}})
    assert refused.value.body["param"] == "response_format.json_schema.schema" and "postcode" in refused.value.message
    with pytest.raises(BadRequestError) as refused:
        openai.chat.completions.create(model=MODEL, messages=ASK, tool_choice="required")
    assert refused.value.body["param"] == "tool_choice" and "offers no tools" in refused.value.message

    sampled = [openai.chat.completions.create(model=MODEL, messages=ASK, max_tokens=12, temperature=1.0, seed=11,
                                              logprobs=True, top_logprobs=2) for _ in range(2)]
    assert sampled[0].choices[0].message.content == sampled[1].choices[0].message.content  # the seed reproduces it
    tokens = sampled[0].choices[0].logprobs.content
    assert len(tokens) == sampled[0].usage.completion_tokens and all(len(t.top_logprobs) == 2 for t in tokens)
    text = sampled[0].choices[0].message.content
    if len(text) > 3:  # a stop string from inside the answer cuts it there
        stop = text[2:4]
        cut = openai.chat.completions.create(model=MODEL, messages=ASK, max_tokens=12, temperature=1.0, seed=11,
                                             stop=[stop])
        assert cut.choices[0].message.content == text[:text.index(stop)]
        assert cut.choices[0].finish_reason == "stop"

    echoed = openai.completions.create(model=MODEL, prompt="The cat sat on the", max_tokens=0, echo=True,
                                       logprobs=1)
    choice = echoed.choices[0]
    assert choice.logprobs.token_logprobs[0] is None and all(lp <= 0 for lp in choice.logprobs.token_logprobs[1:])
    assert "".join(choice.logprobs.tokens) == choice.text and echoed.usage.completion_tokens == 0
    continued = openai.completions.create(model=MODEL, prompt="The cat sat on the", max_tokens=5, temperature=0)
    assert continued.choices[0].finish_reason in ("stop", "length") and continued.object == "text_completion"

    with pytest.raises(RateLimitError):  # two prompts need two rows; this endpoint has one and no queue
        openai.completions.create(model=MODEL, prompt=["The cat sat on the", "A dog ran"], max_tokens=5)

    assert openai.models.retrieve(MODEL).id == MODEL
    with pytest.raises(NotFoundError):
        openai.models.retrieve("nobody/nothing")
    missing = client.post("/v1/embeddings", json={"model": MODEL, "input": "hi"})
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"
    assert missing.json()["error"]["message"].startswith("no route POST /v1/embeddings")


def test_an_endpoint_s_own_completions_route_and_a_repeated_prompt_s_cached_tokens(served):
    proc, client, endpoint_id = served
    own = client.post(f"/v1/training/endpoints/{endpoint_id}/completions",
                      json={"prompt": "The cat sat on the", "max_tokens": 3, "temperature": 0})  # no model: its own
    assert own.status_code == 200 and own.json()["model"] == MODEL and own.json()["object"] == "text_completion"
    long_ask = [{"role": "system", "content": "You answer questions about cats in one short sentence, kindly."},
                {"role": "user", "content": "Why do cats sit in boxes when there is a soft bed right next to them?"}]
    usages = [client.post("/v1/chat/completions", json={"model": MODEL, "messages": long_ask, "max_tokens": 2,
                                                        "temperature": 0}).json()["usage"] for _ in range(2)]
    first, again = (usage["prompt_tokens_details"]["cached_tokens"] for usage in usages)
    # the first shares only the template's opening with earlier requests; the same prompt again is taken whole
    # but for its last token (computed: its logits give the first answer token)
    assert first < again == usages[1]["prompt_tokens"] - 1


def test_max_tokens_past_the_deployment_s_cap_is_refused_and_metrics_are_scraped(served):
    proc, client, endpoint = served
    capped = client.post("/v1/chat/completions", json={"model": MODEL, "messages": ASK, "max_tokens": 4001})
    assert capped.status_code == 400 and capped.json()["error"]["param"] == "max_tokens"
    assert "at most 4,000 (this deployment's cap on one answer" in capped.json()["error"]["message"]

    scraped = client.get("/metrics")
    assert scraped.status_code == 200 and scraped.headers["content-type"].startswith("text/plain; version=0.0.4")
    lines = scraped.text.splitlines()
    assert "# TYPE optimize_jobs gauge" in lines
    assert any(line.startswith('optimize_jobs{kind="endpoint",phase="READY"} ') and not line.endswith(" 0")
               for line in lines)
    assert 'optimize_devices{profile="cpu",pool="serving",state="granted"} 1' in lines
    deadline = time.monotonic() + 20
    while not any(line.startswith(f'optimize_endpoint_requests_served_total{{endpoint="{endpoint}"')
                  for line in client.get("/metrics").text.splitlines()):
        assert time.monotonic() < deadline, "no endpoint series"
        time.sleep(0.2)
    assert "# TYPE optimize_endpoint_tokens_generated_total counter" in client.get("/metrics").text
