"""One rule for `?limit=` on every list route, and a project's scores refuse a grader that is not one."""

from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.integration

LIMITED = ["/v1/training/runs/nosuchrun/metrics", "/v1/training/evaluations/nosuchevaluation/predictions"]


def test_every_route_taking_a_limit_declares_the_same_bounds(server):
    spec = httpx.get(f"{server.url}/openapi.json", headers=server.headers).json()
    limits = {path: [p for p in operation.get("parameters", []) if p["name"] == "limit"]
              for path, item in spec["paths"].items() for operation in item.values() if isinstance(operation, dict)}
    limits = {path: found[0]["schema"] for path, found in limits.items() if found}
    assert {"/v1/training/runs/{run_id}/metrics", "/v1/training/evaluations/{evaluation_id}/predictions"} <= set(limits)
    assert len({repr(schema) for schema in limits.values()}) == 1, limits  # one rule everywhere
    bounds = next(iter(limits.values()))["anyOf"][0]
    assert bounds["minimum"] == 1 and bounds["maximum"] == 1_000_000


@pytest.mark.parametrize("value", ["-5", "0", "-1", "1e30", str(10**30), "1000001", "abc"])
def test_a_limit_out_of_bounds_is_the_same_422_on_every_route(server, value):
    details = set()
    for path in LIMITED:
        response = httpx.get(f"{server.url}{path}", params={"limit": value}, headers=server.headers)
        assert response.status_code == 422, (path, response.status_code, response.text)
        assert response.headers["content-type"].startswith("application/problem+json")
        details.add(response.json()["detail"])
    assert len(details) == 1 and next(iter(details)).startswith("limit: "), details


def test_a_limit_in_bounds_reaches_the_route(server):
    for path in LIMITED:
        response = httpx.get(f"{server.url}{path}", params={"limit": 1_000_000}, headers=server.headers)
        assert response.status_code == 404, response.text  # the route ran: the run or evaluation is not there


def test_scores_refuse_an_unknown_grader_naming_the_graders(server):
    name = "scoresgrader"
    created = httpx.post(f"{server.url}/v1/training/projects", json={"name": name}, headers=server.headers)
    assert created.status_code in (200, 201), created.text
    url = f"{server.url}/v1/training/projects/{name}/scores"
    refused = httpx.get(url, params={"grader": "bogus:x"}, headers=server.headers)
    assert refused.status_code == 422, refused.text
    body = refused.json()
    assert ("'bogus:x' is not one of json-label-match, exact, contains, regex:PATTERN, numeric[:TOLERANCE], "
            "http:URL, model:REF") in body["detail"]
    assert body["hint"].startswith("e.g. --grader ")
    known = httpx.get(url, params={"grader": "http://127.0.0.1:8000/score"}, headers=server.headers)
    assert known.status_code == 200, known.text
    assert known.json()["grader"] == "http:http://127.0.0.1:8000/score" and known.json()["groups"] == []
