"""The endpoint routes and the OpenAI-compatible routes refuse bad input with a problem naming what is wrong:
never a 500, and nothing is stored.

The app runs in this process (`create_app` on a fresh data folder, served through Starlette's TestClient): the
same routes and problem handlers as `akka server start`, without a server process or a scheduler, so an
endpoint that is created waits for capacity and never starts a worker.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from optimize.api.app import create_app
from optimize.core.settings import ServerSettings
from optimize.store.tables import Endpoint, Event
from tests.conftest import from_standin

MODEL = "optimize/tiny-llama-3.2"  # a stand-in, imported from the copy the session built
NOT_SELECTED = "optimize/tiny-qwen2.5"
ENDPOINTS = "/v1/training/endpoints"


def open_client(data_dir) -> TestClient:
    app = create_app(ServerSettings(data_dir=data_dir, detect_gpus=False))
    token = (data_dir / "admin-token").read_text().strip()  # written at the app's first start
    # a crash answers 500 here, as it would to a client
    return TestClient(app, raise_server_exceptions=False, headers={"Authorization": f"Bearer {token}"})


def close_client(client: TestClient) -> None:
    client.close()
    client.app.state.registry.store.dispose()


@pytest.fixture(scope="module")
def bare(tmp_path_factory):
    """A server with nothing selected and nothing served, shared by the tests of the chat routes' refusals (none of
    them stores anything)."""
    client = open_client(tmp_path_factory.mktemp("bare"))
    yield client
    close_client(client)


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    """A server with MODEL selected, a project `shop` and an archived project `closed`."""
    client = open_client(tmp_path_factory.mktemp("endpoints-api"))
    client.post(f"/v1/training/base-models/{MODEL}/select", json=from_standin(MODEL)).raise_for_status()
    for name in ("shop", "closed"):
        client.post("/v1/training/projects", json={"name": name}).raise_for_status()
    client.post("/v1/training/projects/closed/archive").raise_for_status()
    yield client
    close_client(client)


def stored(client: TestClient) -> tuple[int, int]:
    """How many endpoints there are, and how many events were recorded about endpoints."""
    with client.app.state.deployment.store.transaction() as session:
        return (session.scalar(select(func.count()).select_from(Endpoint)),
                session.scalar(select(func.count()).select_from(Event).where(Event.subject.like("endpoint:%"))))


def is_problem(response, status: int | None) -> dict:
    """A problem+json answer with this status (None: any 4xx) and a detail saying what is wrong."""
    if status is None:
        assert 400 <= response.status_code < 500, response.text
    else:
        assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body["status"] == response.status_code and body["detail"]
    return body


def is_openai_problem(response, status: int | None) -> str:
    """A refusal on an OpenAI route also carries `error.message`, where OpenAI clients read it."""
    body = is_problem(response, status)
    assert body["error"]["message"].startswith(body["detail"]) and body["error"]["code"] == body["code"]
    return body["error"]["message"]


def refused_storing_nothing(client: TestClient, method: str, path: str, status: int | None, **kwargs) -> dict:
    before = stored(client)
    body = is_problem(client.request(method, path, **kwargs), status)
    assert stored(client) == before
    return body


# --- POST /v1/training/endpoints ---------------------------------------------------------------------------


def test_create_without_a_body_is_refused(client):
    refused_storing_nothing(client, "POST", ENDPOINTS, 422)


@pytest.mark.parametrize("payload", [{}, [MODEL], MODEL, {"model": 5}, {"model": None}, {"model": [MODEL]},
                                     {"project": "shop"}],
                         ids=["empty", "a-list", "a-string", "model-number", "model-null", "model-list",
                              "project-only"])
def test_create_without_a_model_reference_is_refused_naming_model(client, payload):
    body = refused_storing_nothing(client, "POST", ENDPOINTS, 422, json=payload)
    assert "an endpoint needs model" in body["detail"]


def test_create_with_a_model_not_in_the_catalog_is_not_found(client):
    body = refused_storing_nothing(client, "POST", ENDPOINTS, 404, json={"model": "nosuch/model", "project": "shop"})
    assert "'nosuch/model'" in body["detail"] and "base-models list" in body["hint"]


def test_create_with_a_base_model_not_selected_says_to_select_it(client):
    body = refused_storing_nothing(client, "POST", ENDPOINTS, 404, json={"model": NOT_SELECTED, "project": "shop"})
    assert f"{NOT_SELECTED} is not selected" in body["detail"]
    assert f"base-models select {NOT_SELECTED}" in body["hint"]


def test_create_with_an_unknown_device_profile_is_refused_naming_the_profiles(client):
    body = refused_storing_nothing(client, "POST", ENDPOINTS, 400,
                                   json={"model": MODEL, "project": "shop", "deviceProfile": "tpu"})
    assert "deviceProfile 'tpu'" in body["detail"] and "cpu" in body["hint"]


@pytest.mark.parametrize("profile", [["cpu"], {"name": "cpu"}], ids=["list", "object"])
def test_create_with_a_device_profile_that_is_not_a_name_is_refused(client, profile):
    refused_storing_nothing(client, "POST", ENDPOINTS, None,
                            json={"model": MODEL, "project": "shop", "deviceProfile": profile})


def test_create_for_a_base_model_without_a_project_is_refused(client):
    body = refused_storing_nothing(client, "POST", ENDPOINTS, 422, json={"model": MODEL})
    assert "belongs to no project" in body["detail"] and "--project" in body["hint"]


def test_create_in_a_project_that_does_not_exist_is_not_found(client):
    body = refused_storing_nothing(client, "POST", ENDPOINTS, 404, json={"model": MODEL, "project": "nosuch"})
    assert "nosuch" in body["detail"]


@pytest.mark.parametrize("project", ["closed", "CLOSED"])
def test_create_in_an_archived_project_is_refused(client, project):
    body = refused_storing_nothing(client, "POST", ENDPOINTS, 400, json={"model": MODEL, "project": project})
    assert "'closed' is archived" in body["detail"] and "unarchive closed" in body["hint"]


@pytest.mark.parametrize("project", [5, ["shop"]], ids=["number", "list"])
def test_create_with_a_project_that_is_not_a_name_is_refused(client, project):
    refused_storing_nothing(client, "POST", ENDPOINTS, None, json={"model": MODEL, "project": project})


# --- reading, deleting and detaching -----------------------------------------------------------------------


@pytest.mark.parametrize("method, path", [("GET", f"{ENDPOINTS}/nosuchendpoint"),
                                          ("DELETE", f"{ENDPOINTS}/nosuchendpoint"),
                                          ("GET", f"{ENDPOINTS}/nosuchendpoint/events")])
def test_an_unknown_endpoint_is_not_found(client, method, path):
    body = refused_storing_nothing(client, method, path, 404)
    assert "endpoint 'nosuchendpoint' does not exist" in body["detail"] and "endpoints list" in body["hint"]


def test_listing_with_an_unknown_phase_is_refused_naming_the_phases(client):
    body = is_problem(client.get(f"{ENDPOINTS}?phase=sleeping"), 422)
    assert "'sleeping'" in body["detail"] and "AWAITING_CAPACITY" in body["hint"]


def test_detach_without_a_body_is_refused(client):
    refused_storing_nothing(client, "POST", f"{ENDPOINTS}/nosuchendpoint/detach", 422)


@pytest.mark.parametrize("payload", [{}, {"model": ""}, {"model": 5}, ["acme/helper"], "acme/helper"],
                         ids=["empty", "model-empty", "model-number", "a-list", "a-string"])
def test_detach_without_a_model_is_refused_naming_model(client, payload):
    body = refused_storing_nothing(client, "POST", f"{ENDPOINTS}/nosuchendpoint/detach", 422, json=payload)
    assert "detach needs model" in body["detail"]


def test_detach_from_an_unknown_endpoint_is_not_found(client):
    refused_storing_nothing(client, "POST", f"{ENDPOINTS}/nosuchendpoint/detach", 404, json={"model": "acme/helper"})


def test_an_endpoint_waiting_for_capacity_refuses_what_it_cannot_do(client):
    created = client.post(ENDPOINTS, json={"model": MODEL, "project": "shop"})
    assert created.status_code == 202, created.text
    endpoint = created.json()
    assert endpoint["phase"] == "AWAITING_CAPACITY" and endpoint["attached"] is False
    short = endpoint["endpointId"][:12]
    try:
        assert client.get("/v1/models").json() == {"object": "list", "data": []}  # nothing answers yet
        message = is_openai_problem(client.post("/v1/chat/completions", json={"model": MODEL, "messages": []}), 409)
        assert f"model {MODEL} is not answering yet" in message and f"endpoints wait {short}" in message
        body = refused_storing_nothing(client, "POST", f"{ENDPOINTS}/{short}/detach", 404, json={"model": MODEL})
        assert "has no adapter" in body["detail"] and "deleting the endpoint" in body["hint"]
        refused_storing_nothing(client, "POST", f"{ENDPOINTS}/{short}/detach", 404, json={"model": "shop/helper"})
    finally:
        assert client.delete(f"{ENDPOINTS}/{short}").json()["phase"] == "DELETED"
    body = refused_storing_nothing(client, "POST", f"{ENDPOINTS}/{short}/detach", 400, json={"model": "shop/helper"})
    assert "DELETED" in body["detail"]
    message = is_openai_problem(client.post(f"{ENDPOINTS}/{short}/chat/completions",
                                            json={"model": MODEL, "messages": []}), 409)
    assert f"endpoint {short} is DELETED" in message
    assert client.delete(f"{ENDPOINTS}/{short}").status_code == 200  # deleting again changes nothing


def test_chat_with_a_deleted_endpoint_says_it_answers_nothing(client):
    short = client.post(ENDPOINTS, json={"model": MODEL, "project": "shop"}).json()["endpointId"][:12]
    client.delete(f"{ENDPOINTS}/{short}").raise_for_status()
    message = is_openai_problem(client.post(f"{ENDPOINTS}/{short}/chat/completions",
                                            json={"model": MODEL, "messages": []}), 409)
    assert "DELETED and answers nothing" in message and "wait for it" not in message


# --- POST /v1/chat/completions and GET /v1/models --------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/chat/completions", f"{ENDPOINTS}/nosuchendpoint/chat/completions"])
def test_chat_with_a_body_that_is_not_json_is_refused(bare, path):
    message = is_openai_problem(bare.post(path, content=b"{nope", headers={"content-type": "application/json"}),
                                422)
    assert "not JSON" in message


@pytest.mark.parametrize("path", ["/v1/chat/completions", f"{ENDPOINTS}/nosuchendpoint/chat/completions"])
def test_chat_with_a_body_nested_too_deeply_is_refused(bare, path):
    # the chat routes read their body themselves: Python's json gives up on deep nesting with a RecursionError
    deep = b"[" * 5_000 + b"]" * 5_000
    message = is_openai_problem(bare.post(path, content=deep, headers={"content-type": "application/json"}), 422)
    assert "nested too deeply" in message


@pytest.mark.parametrize("payload", [None, [{"model": MODEL}], "hello", 5],
                         ids=["no-body", "a-list", "a-string", "a-number"])
def test_chat_with_a_body_that_is_not_an_object_is_refused(bare, payload):
    message = is_openai_problem(bare.post("/v1/chat/completions", json=payload), 422)
    assert "JSON object with model and messages" in message


@pytest.mark.parametrize("payload", [{"messages": [{"role": "user", "content": "hi"}]}, {"model": "", "messages": []},
                                     {"model": None}], ids=["no-model", "empty-model", "null-model"])
def test_chat_naming_no_model_is_refused(bare, payload):
    message = is_openai_problem(bare.post("/v1/chat/completions", json=payload), 422)
    assert "names no model" in message and "/v1/models" in message


@pytest.mark.parametrize("model", [MODEL, "acme/helper", "acme/helper:v3", "nosuch-model"])
def test_chat_with_a_model_not_served_is_not_found_naming_it(bare, model):
    message = is_openai_problem(bare.post("/v1/chat/completions", json={"model": model, "messages": []}), 404)
    assert f"model {model!r} is not served by any endpoint" in message
    assert f"endpoints create --model {model}" in message


def test_chat_with_an_unknown_endpoint_is_not_found(bare):
    message = is_openai_problem(bare.post(f"{ENDPOINTS}/nosuchendpoint/chat/completions",
                                          json={"model": MODEL, "messages": []}), 404)
    assert "endpoint 'nosuchendpoint' does not exist" in message


@pytest.mark.parametrize("model", [5, [MODEL], {"id": MODEL}], ids=["number", "list", "object"])
def test_chat_with_a_model_that_is_not_a_string_is_refused(bare, model):
    is_openai_problem(bare.post("/v1/chat/completions", json={"model": model, "messages": []}), None)


def test_models_on_a_server_serving_nothing_is_an_empty_list(bare):
    response = bare.get("/v1/models")
    assert response.status_code == 200 and response.json() == {"object": "list", "data": []}


def test_a_job_granted_its_devices_is_not_said_to_wait_for_itself(client):
    """Between the grant and its worker's start a job holds its devices in its waiting phase."""
    from optimize.jobs.devices import pool_devices
    from optimize.jobs.leases import grant

    short = client.post(ENDPOINTS, json={"model": MODEL, "project": "shop"}).json()["endpointId"][:12]
    try:
        endpoint = client.get(f"{ENDPOINTS}/{short}").json()
        assert endpoint["waitingFor"] == "waiting for the scheduler to grant the free devices"
        training = client.app.state.deployment
        profile = next(p for p in training.profiles if p.kind == "cpu")
        with training.store.transaction() as session:
            grant(session, "endpoint", endpoint["endpointId"], 1, pool_devices(profile, "serving")[:1], 60)
        assert client.get(f"{ENDPOINTS}/{short}").json()["waitingFor"] == \
            "its devices are granted; its worker is starting"
    finally:
        client.delete(f"{ENDPOINTS}/{short}")
