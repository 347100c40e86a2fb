"""`akka training endpoints disable|enable ENDPOINT MODEL` against a real server: a disabled model is answered 409
through the server (the OpenAI routes and the endpoint's own), is left out of `GET /v1/models`, and its endpoint
keeps its device; `enable` undoes it. One endpoint of the base stand-in on a server of this module's own (the cpu
has one serving slot, which the endpoint holds until the last test deletes it)."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import Cli
from tests.endpoint_fixtures import ENDPOINTS, server_with_endpoint

pytestmark = pytest.mark.integration
LLAMA = "optimize/tiny-llama-3.2"
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(the server, a client as its administrator, the READY endpoint's id); the endpoint is deleted at the end."""
    with server_with_endpoint(tmp_path_factory.mktemp("endpoint-disable"), LLAMA, "serve") as served:
        yield served


def _chat(client: httpx.Client, path: str = "/v1/chat/completions") -> httpx.Response:
    return client.post(path, json={"model": LLAMA, "messages": HI, "max_tokens": 2, "temperature": 0})


def _refused_as_disabled(response: httpx.Response, short: str) -> None:
    assert response.status_code == 409, response.text
    body = response.json()
    assert body["detail"] == f"model {LLAMA} is disabled at endpoint {short}"
    assert body["hint"] == f"enable it with: akka training endpoints enable {short} {LLAMA}"
    error = body["error"]  # where OpenAI clients read it
    assert error["message"].startswith(body["detail"]) and f"endpoints enable {short} {LLAMA}" in error["message"]
    assert error["code"] == "conflict"


def test_a_disabled_model_is_refused_through_the_server_and_keeps_its_device(served, capsys):
    proc, client, endpoint_id = served
    cli, short = Cli(capsys, proc.url), endpoint_id[:12]
    assert _chat(client).status_code == 200
    assert [m["enabled"] for m in client.get(f"{ENDPOINTS}/{endpoint_id}").json()["models"]] == [True]

    said = cli.ok("training", "endpoints", "disable", short, LLAMA).out
    assert said.strip() == (f"Model {LLAMA} disabled at endpoint {short}: requests through the server answer 409; "
                            f"enable it with: akka training endpoints enable {short} {LLAMA}")
    _refused_as_disabled(_chat(client), short)
    _refused_as_disabled(_chat(client, f"{ENDPOINTS}/{short}/chat/completions"), short)
    completion = client.post("/v1/completions", json={"model": LLAMA, "prompt": "hi", "max_tokens": 2})
    _refused_as_disabled(completion, short)
    assert client.get("/v1/models").json() == {"object": "list", "data": []}

    endpoint = cli.json("training", "endpoints", "get", short)
    assert endpoint["phase"] == "READY" and endpoint["devicesHeld"] == ["cpu:serving:0"]  # the device is kept
    assert endpoint["models"][0]["enabled"] is False and endpoint["models"][0]["ready"] is True
    assert f"{LLAMA:<40} answering (disabled)" in cli.ok("training", "endpoints", "get", short).out

    again = cli.json("training", "endpoints", "disable", short, LLAMA)  # changes nothing
    assert again["endpointId"] == endpoint_id and again["models"][0]["enabled"] is False
    assert again["phase"] == "READY" and again["devicesHeld"] == ["cpu:serving:0"]

    said = cli.ok("training", "endpoints", "enable", short, LLAMA).out
    assert said.strip() == f"Model {LLAMA} enabled at endpoint {short}: it answers through the server again."
    answer = _chat(client)
    assert answer.status_code == 200 and answer.json()["model"] == LLAMA
    assert [m["id"] for m in client.get("/v1/models").json()["data"]] == [LLAMA]
    assert "(disabled)" not in cli.ok("training", "endpoints", "get", short).out
    enabled = cli.json("training", "endpoints", "enable", short, LLAMA)  # changes nothing
    assert enabled["models"][0]["enabled"] is True and enabled["settled"] is True


def test_disable_and_enable_refuse_what_the_endpoint_does_not_serve(served, capsys):
    proc, client, endpoint_id = served
    cli, short = Cli(capsys, proc.url), endpoint_id[:12]
    for verb in ("disable", "enable"):
        refused = client.post(f"{ENDPOINTS}/{short}/{verb}", json={"model": "serve/nosuch"})
        assert refused.status_code == 404, refused.text
        assert refused.json()["detail"] == f"endpoint {short} serves no model 'serve/nosuch' (it serves: {LLAMA})"
        assert f"akka training endpoints {verb} {short} MODEL" in refused.json()["hint"]
        failed = cli("training", "endpoints", verb, short, "serve/nosuch")
        assert failed.code != 0 and "serves no model 'serve/nosuch'" in failed.err
        for body in ({}, {"model": ""}, {"model": 5}, [LLAMA]):
            invalid = client.post(f"{ENDPOINTS}/{short}/{verb}", json=body)
            assert invalid.status_code == 422 and invalid.json()["detail"].startswith(f"{verb} needs model"), body
        assert client.post(f"{ENDPOINTS}/nosuchendpoint/{verb}", json={"model": LLAMA}).status_code == 404
    assert client.get(f"{ENDPOINTS}/{endpoint_id}").json()["models"][0]["enabled"] is True  # nothing changed


def test_a_deleted_endpoint_refuses_both(served, capsys):
    proc, client, endpoint_id = served
    cli, short = Cli(capsys, proc.url), endpoint_id[:12]
    cli.json("training", "endpoints", "disable", short, LLAMA)
    deleted = cli.json("training", "endpoints", "delete", short)
    assert deleted["phase"] == "DELETED" and deleted["devicesHeld"] == []
    for verb in ("disable", "enable"):
        refused = client.post(f"{ENDPOINTS}/{short}/{verb}", json={"model": LLAMA})
        assert refused.status_code == 400, refused.text
        assert refused.json()["detail"] == f"endpoint {short} is DELETED; it serves nothing to {verb}"
        assert "is DELETED" in cli("training", "endpoints", verb, short, LLAMA).err
    gone = _chat(client, f"{ENDPOINTS}/{short}/chat/completions")  # an ended endpoint answers as it always did
    assert gone.status_code == 409 and f"endpoint {short} is DELETED" in gone.json()["detail"]
