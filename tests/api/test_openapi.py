"""`/openapi.json` describes every public answer: each public operation documents its 2xx answers with a schema (a
model's `$ref`, never an empty `{}` or a bare object), or, for a server-sent events stream, text/event-stream; and
every field of the request and answer models has a description. The answer models document and check an answer
without rewriting it.

The app runs in this process (`create_app` on a fresh data folder, served through Starlette's TestClient), as in
test_endpoints_refusals.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel, Field

import optimize.schemas
from optimize.api.app import create_app
from optimize.core.settings import ServerSettings
from optimize.schemas.common import Answer, Number

INTERNAL = "/v1/internal/"
METHODS = {"get", "put", "post", "patch", "delete"}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    client = TestClient(create_app(ServerSettings(data_dir=tmp_path_factory.mktemp("openapi"), detect_gpus=False)))
    yield client
    client.close()
    client.app.state.registry.store.dispose()


@pytest.fixture(scope="module")
def document(client) -> dict:
    response = client.get("/openapi.json")
    assert response.status_code == 200, response.text
    return response.json()


def operations(document: dict):
    for path, item in document["paths"].items():
        if path.startswith(INTERNAL):
            continue
        for method, operation in item.items():
            if method in METHODS:
                yield method.upper(), path, operation


def described(schema: dict) -> bool:
    """A schema that says what the answer holds: a model, a list of models or a choice between them."""
    if "$ref" in schema:
        return True
    if schema.get("anyOf") or schema.get("oneOf"):
        return all(described(s) for s in schema.get("anyOf") or schema["oneOf"])
    if schema.get("type") == "array":
        return described(schema.get("items") or {})
    return schema.get("type") == "object" and bool(schema.get("properties"))


def test_the_document_lists_the_public_routes(document):
    found = {(method, path) for method, path, _ in operations(document)}
    assert len(found) > 60
    for expected in [("GET", "/v1/health"), ("GET", "/v1/registry/info"), ("POST", "/v1/training/runs"),
                     ("GET", "/v1/training/runs/{run_id}/events"), ("POST", "/v1/chat/completions"),
                     ("GET", "/v1/models"), ("POST", "/v1/training/endpoints")]:
        assert expected in found
    assert not any(path.startswith(INTERNAL) for path in document["paths"])  # worker routes stay out of it


def test_every_public_operation_documents_its_answer(document):
    problems = []
    for method, path, operation in operations(document):
        answers = {code: response for code, response in operation["responses"].items() if code.startswith("2")}
        if not answers:
            problems.append(f"{method} {path}: no 2xx answer")
        for code, response in answers.items():
            content = response.get("content") or {}
            if path.endswith("/events"):
                if set(content) != {"text/event-stream"}:
                    problems.append(f"{method} {path} {code}: a stream documents text/event-stream, not {set(content)}")
                continue
            schema = (content.get("application/json") or {}).get("schema")
            if schema is None or not described(schema):
                problems.append(f"{method} {path} {code}: the JSON answer has no schema ({schema!r})")
    assert not problems, "\n".join(problems)


def test_answers_with_two_statuses_document_both(document):
    responses = document["paths"]["/v1/training/runs"]["post"]["responses"]
    assert responses["202"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Run"}
    choices = responses["200"]["content"]["application/json"]["schema"]["anyOf"]
    assert {"$ref": "#/components/schemas/DryRun"} in choices
    shard = document["paths"]["/v1/registry/dataset-uploads/{upload_id}/shards/{index}"]["put"]["responses"]
    assert {"200", "201"} <= set(shard)
    chat = document["paths"]["/v1/chat/completions"]["post"]
    assert set(chat["responses"]["200"]["content"]) == {"application/json", "text/event-stream"}
    assert "messages" in chat["requestBody"]["content"]["application/json"]["schema"]["properties"]


def test_answer_schemas_use_the_json_keys(document):
    schemas = document["components"]["schemas"]
    run = schemas["Run"]["properties"]
    for key in ("runId", "baseModel", "lengthCheck", "savedStep", "parentRunId"):
        assert key in run, key
    assert "for" in schemas["Claim"]["properties"] and "memoryGiB" in schemas["Pool"]["properties"]
    assert "owned_by" in schemas["ServedModel"]["properties"]  # OpenAI's shapes keep their snake_case keys
    assert "settings" not in schemas["Run"]["required"]  # only with ?settings=true


def schema_models() -> list[type[BaseModel]]:
    found = {}
    for info in pkgutil.iter_modules(optimize.schemas.__path__):
        module = importlib.import_module(f"optimize.schemas.{info.name}")
        for _, item in inspect.getmembers(module, inspect.isclass):
            if issubclass(item, BaseModel) and item.__module__ == module.__name__:
                found[f"{module.__name__}.{item.__name__}"] = item
    return list(found.values())


def test_every_field_has_a_description():
    models = schema_models()
    assert len(models) > 50
    missing = [f"{model.__module__}.{model.__name__}.{name}" for model in models
               for name, field in model.model_fields.items() if not field.description]
    assert not missing, missing


def _models():
    class Point(Answer):
        value: Number = Field(description="a number")

    class Item(Answer):
        item_id: str = Field(description="id")
        note: str | None = Field(default=None, description="sometimes there")
        point: Point | None = Field(default=None, description="a nested answer")
        points: list[Point] = Field(default_factory=list, description="nested answers")

    return Item


def test_an_answer_comes_out_as_the_service_built_it():
    item = _models()
    given = {"zeta": [1, {"b": 2}], "points": [{"value": 1, "extra": True}, {"value": 2.5}], "itemId": "abc",
             "point": None}
    dumped = item.model_validate(given).model_dump(mode="json", by_alias=True)
    assert json.dumps(dumped) == json.dumps(given)  # same keys, same order, 1 stays 1, note is not added
    assert "note" not in dumped
    by_name = item.model_validate(given).model_dump(mode="json")
    assert list(by_name) == ["zeta", "points", "item_id", "point"]
    built = item(item_id="x", note=None)  # built in code: the same rule, the keys given are the keys answered
    assert built.model_dump(by_alias=True) == {"itemId": "x", "note": None}


def test_a_wrong_answer_is_caught():
    item = _models()
    with pytest.raises(ValueError):
        item.model_validate({"note": "no id"})
    with pytest.raises(ValueError):
        item.model_validate({"itemId": "x", "points": [{"value": "not a number"}]})


def test_a_route_answers_what_its_service_built(client):
    limits = client.app.state.registry.limits
    answer = client.get("/v1/registry/info").json()
    assert list(answer) == ["version", "datasets"]
    assert answer["datasets"] == {**limits.to_json(), "formats": answer["datasets"]["formats"]}
    assert list(answer["datasets"]) == [*limits.to_json(), "formats"]
    assert client.get("/v1/training/projects").json() == {"projects": []}
