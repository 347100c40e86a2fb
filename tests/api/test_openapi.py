"""`/openapi.json` describes every public answer: each public operation documents its 2xx answers with a schema (a
model's `$ref`, never an empty `{}` or a bare object), or, for a server-sent events stream, text/event-stream; and
every field of the request and answer models has a description. The answer models document and check an answer
without rewriting it.

Every public request body is documented too: a JSON body by an object schema with named properties (a model's `$ref`
included), a streamed one by its media type; every `$ref` in the document resolves. The routes that read their body
as sent (`optimize.api.bodies`) still refuse a bad one in their own words.

The app runs in this process (`create_app` on a fresh data folder, served through Starlette's TestClient), as in
test_endpoints_refusals.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil

import pytest
from fastapi.routing import APIRoute
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
    folder = tmp_path_factory.mktemp("openapi")
    app = create_app(ServerSettings(data_dir=folder, detect_gpus=False))
    client = TestClient(app, headers={"Authorization": f"Bearer {(folder / 'admin-token').read_text().strip()}"})
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
            if path.endswith("/events") and not path.startswith("/v1/fine_tuning/"):  # OpenAI's events: a list
                if set(content) != {"text/event-stream"}:
                    problems.append(f"{method} {path} {code}: a stream documents text/event-stream, not {set(content)}")
                continue
            if "application/octet-stream" in content:  # a file's bytes: a described binary string, nothing else
                binary = content["application/octet-stream"].get("schema") or {}
                if set(content) != {"application/octet-stream"} or binary.get("format") != "binary" \
                        or not binary.get("description"):
                    problems.append(f"{method} {path} {code}: a file answer documents only described binary bytes")
                continue
            if content and all(kind.startswith("image/") for kind in content):  # an image: described bytes
                if any((item.get("schema") or {}).get("format") != "binary"
                       or not (item.get("schema") or {}).get("description") for item in content.values()):
                    problems.append(f"{method} {path} {code}: an image answer documents described binary bytes")
                continue
            if set(content) == {"text/plain"}:  # a text format of its own (Prometheus'): a described string
                if not (content["text/plain"].get("schema") or {}).get("description"):
                    problems.append(f"{method} {path} {code}: a text answer documents a described string")
                continue
            schema = (content.get("application/json") or {}).get("schema")
            if schema is None or not described(schema):
                problems.append(f"{method} {path} {code}: the JSON answer has no schema ({schema!r})")
    assert not problems, "\n".join(problems)
    files = document["paths"]["/v1/registry/models/{namespace}/{name}/versions/{selector}/files/{path}"]["get"]
    assert files["responses"]["200"]["content"]["application/octet-stream"]["schema"]["format"] == "binary"


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


def pointer(document: dict, ref: str):
    """The node a local `$ref` names (a JSON pointer into the document); KeyError when there is none."""
    assert ref.startswith("#/"), f"{ref}: not a reference into the document"
    node = document
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def resolved(document: dict, schema: dict) -> dict:
    while "$ref" in schema:
        schema = pointer(document, schema["$ref"])
    return schema


def named_object(document: dict, schema: dict) -> bool:
    """An object with named properties, directly or by `$ref`; a body that may be left out may be it or null."""
    schema = resolved(document, schema)
    choices = [s for s in schema.get("anyOf") or [] if s != {"type": "null"}]
    if choices:
        return all(named_object(document, s) for s in choices)
    return schema.get("type") == "object" and bool(schema.get("properties"))


def body_problems(document: dict) -> list[str]:
    problems = []
    for method, path, operation in operations(document):
        content = (operation.get("requestBody") or {}).get("content")
        if "requestBody" in operation and not content:
            problems.append(f"{method} {path}: a requestBody without content")
        for media_type, media in (content or {}).items():
            schema = media.get("schema") or {}
            if media_type == "application/json":
                if not named_object(document, schema):
                    problems.append(f"{method} {path}: the JSON body's schema names no properties ({schema!r})")
                    continue
                target = resolved(document, schema)
                for name, item in (target.get("properties") or {}).items():
                    if not (item.get("description") or resolved(document, item).get("description")):
                        problems.append(f"{method} {path}: body field {name} has no description")
            elif not (schema.get("type") and schema.get("description")):
                problems.append(f"{method} {path}: the {media_type} body has no described schema ({schema!r})")
    return problems


def test_every_public_request_body_is_documented(document):
    assert not body_problems(document), "\n".join(body_problems(document))
    bodies = {(method, path) for method, path, operation in operations(document) if "requestBody" in operation}
    for expected in [("POST", "/v1/training/runs"), ("POST", "/v1/training/runs/{run_id}/pause"),
                     ("POST", "/v1/training/runs/{run_id}/branch"), ("POST", "/v1/training/runs/{run_id}/continue"),
                     ("POST", "/v1/training/runs/{run_id}/sweep"), ("POST", "/v1/training/evaluations"),
                     ("POST", "/v1/training/endpoints"), ("POST", "/v1/training/endpoints/{endpoint_id}/detach"),
                     ("POST", "/v1/training/snapshots/{snapshot_id}/register"),
                     ("POST", "/v1/training/snapshots/{snapshot_id}/pin"),
                     ("POST", "/v1/training/snapshots/{snapshot_id}/unpin"),
                     ("PUT", "/v1/registry/dataset-uploads/{upload_id}/shards/{index}")]:
        assert expected in bodies, expected


def test_an_undocumented_body_is_caught(document):
    """What a `body: Any = Body(...)` route documents (FastAPI's bare schema) fails the check above."""
    path = "/v1/training/runs/{run_id}/pause"
    bare = {**document, "paths": {path: {"post": {**document["paths"][path]["post"], "requestBody": {
        "content": {"application/json": {"schema": {"title": "Body", "description": '{"checkpoint": …}'}}}}}}}}
    assert body_problems(bare) == [f"POST {path}: the JSON body's schema names no properties "
                                   "({'title': 'Body', 'description': '{\"checkpoint\": …}'})"]


def test_every_route_that_reads_a_body_documents_it(client, document):
    """A public POST, PUT or PATCH route with a body parameter, or one that reads the request itself, has a
    requestBody in the document."""
    missing = []
    for route in client.app.routes:
        if not isinstance(route, APIRoute) or not route.include_in_schema or route.path.startswith(INTERNAL):
            continue
        for method in sorted(route.methods & {"POST", "PUT", "PATCH"}):
            reads = route.body_field is not None or route.dependant.request_param_name is not None
            if reads and "requestBody" not in document["paths"][route.path][method.lower()]:
                missing.append(f"{method} {route.path}")
    assert not missing, missing


def test_the_run_plan_and_its_parts_are_documented(document):
    schemas = document["components"]["schemas"]
    body = document["paths"]["/v1/training/runs"]["post"]["requestBody"]
    assert body["required"] is True
    assert body["content"]["application/json"]["schema"]["$ref"] == "#/components/schemas/RunPlan"
    plan = schemas["RunPlan"]
    assert {"kind", "project", "baseModel", "config"} <= set(plan["required"])
    assert plan["additionalProperties"] is False  # an unknown field is refused
    config = resolved(document, plan["properties"]["config"])
    assert "maxSeqLength" in config["properties"] and "hyperparams" in config["properties"]
    pause = document["paths"]["/v1/training/runs/{run_id}/pause"]["post"]["requestBody"]
    assert pause["required"] is True  # refused without its checkpoint, in the route's own words
    assert schemas["PauseRequest"]["properties"]["checkpoint"]["enum"] == ["latest", "save"]
    assert "required" not in document["paths"]["/v1/training/runs/{run_id}/branch"]["post"]["requestBody"]
    assert set(schemas["BranchRequest"]["properties"]) == {"snapshotId", "restoreMode", "overrides", "maxSteps",
                                                          "epochs"}
    assert resolved(document, schemas["SweepRequest"]["properties"]["grid"])["required"] == ["axes"]
    assert {"model", "dataset"} == set(schemas["EvaluationRequest"]["required"])
    assert "maxNewTokens" in schemas["EvaluationRequest"]["properties"]


def test_every_ref_resolves(document):
    found, broken = [], []

    def walk(node):
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str):
                found.append(ref)
                try:
                    pointer(document, ref)
                except (KeyError, TypeError, AssertionError):
                    broken.append(ref)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(document)
    assert len(found) > 100 and not broken, broken
    assert "$defs" not in json.dumps(document)  # nested models are registered under components/schemas


@pytest.mark.parametrize("path, body, status, detail", [
    ("/v1/training/runs", ["x"], 422,
     "the run plan must be one JSON object (kind: run, project, baseModel, config, …)"),
    ("/v1/training/runs/nosuch/pause", {"checkpoint": 5}, 422, "checkpoint 5 is not one of latest, save"),
    ("/v1/training/runs/nosuch/pause", None, 422, "checkpoint None is not one of latest, save"),
    ("/v1/training/runs/nosuch/branch", {"zzz": 1}, 422,
     "unknown field(s) zzz; the fields are epochs, maxSteps, overrides, restoreMode, snapshotId"),
    ("/v1/training/runs/nosuch/branch", None, 404, "run 'nosuch' does not exist"),
    ("/v1/training/runs/nosuch/continue", None, 422, "a continuation needs steps: how many more updates it trains"),
    ("/v1/training/runs/nosuch/sweep", "text", 422, "the request body must be one JSON object"),
    ("/v1/training/evaluations", {"model": 5, "dataset": "a/b"}, 422,
     "an evaluation needs model (a base model or NS/NAME[:vN]) and dataset (a registry reference)"),
    ("/v1/training/endpoints", [], 422, "an endpoint needs model (a base model or a registered model NS/NAME[:vN])"),
    ("/v1/training/endpoints/nosuch/detach", {"model": ""}, 422,
     "detach needs model: the attached model reference to stop serving"),
    ("/v1/training/snapshots/nosuch/pin", {"kinds": "weights"}, 422, "kinds must be a list"),
    ("/v1/training/snapshots/nosuch/register", {"name": 5}, 422, "name must be a string"),
])
def test_a_documented_body_still_reaches_its_route_as_sent(client, path, body, status, detail):
    """The model documents the body; the route's own checks refuse it, in their words (not FastAPI's 422)."""
    response = client.post(path, json=body) if body is not None else client.post(path)
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["detail"] == detail


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
    given = {"points": [{"value": 1}, {"value": 2.5}], "itemId": "abc", "point": None}
    dumped = item.model_validate(given).model_dump(mode="json", by_alias=True)
    assert json.dumps(dumped) == json.dumps(given)  # same keys, same order, 1 stays 1, note is not added
    assert "note" not in dumped
    by_name = item.model_validate(given).model_dump(mode="json")
    assert list(by_name) == ["points", "item_id", "point"]
    built = item(item_id="x", note=None)  # built in code: the same rule, the keys given are the keys answered
    assert built.model_dump(by_alias=True) == {"itemId": "x", "note": None}


def test_a_wrong_answer_is_caught():
    item = _models()
    with pytest.raises(ValueError):
        item.model_validate({"note": "no id"})
    with pytest.raises(ValueError):
        item.model_validate({"itemId": "x", "points": [{"value": "not a number"}]})
    with pytest.raises(ValueError):  # every key an answer holds is declared, nested ones too
        item.model_validate({"itemId": "x", "zeta": 1})
    with pytest.raises(ValueError):
        item.model_validate({"itemId": "x", "points": [{"value": 1, "extra": True}]})


def test_a_route_answers_what_its_service_built(client):
    limits = client.app.state.registry.limits
    answer = client.get("/v1/registry/info").json()
    assert list(answer) == ["version", "datasets", "quotas", "blobs"]
    assert answer["datasets"] == {**limits.to_json(), "formats": answer["datasets"]["formats"]}
    assert list(answer["datasets"]) == [*limits.to_json(), "formats"]
    assert client.get("/v1/training/projects").json() == {"projects": []}


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_api_pages_load_every_script_and_style_from_this_server(client, page):
    """Offline: every asset the page names is a path on this server that answers, none a CDN address."""
    import re

    html = client.get(page)
    assert html.status_code == 200 and "/openapi.json" in html.text
    assets = re.findall(r'(?:src|href)="([^"]+)"', html.text)
    assert assets and all(url.startswith("/docs/assets/") for url in assets), assets
    for url in assets:
        response = client.get(url)
        assert response.status_code == 200 and len(response.content) > 1000, url
