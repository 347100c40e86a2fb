"""The API refuses bad input with problem+json naming what is wrong: never a 500, nothing stored."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import httpx
import pytest

from tests.conftest import chat_row, headers_for

pytestmark = pytest.mark.integration

# One client for every request of the module: `httpx.request` makes a client per call, which reads the certificate
# authorities again each time (tens of milliseconds, longer than most of these requests take the server).
CLIENT = httpx.Client(timeout=5)

TRAVERSALS = ["..", "%2e%2e%2f", "..%5c", "C:%5C", "%00", "%E2%80%A4x", "%EF%BC%8E%EF%BC%8E", "x" * 300, "a.", "UP PER"]


def jsonl(rows) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def open_upload(url, dataset, data: bytes, fmt="chat-jsonl-v1", lines=None):
    shard = {"index": 0, "path": "examples.jsonl", "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
             "lines": lines or data.count(b"\n")}
    response = CLIENT.post(f"{url}/v1/registry/dataset-uploads", headers=headers_for(url),
                           json={"dataset": dataset, "format": fmt, "shards": [shard]})
    assert response.status_code == 200, response.text
    return response.json()


def call(method: str, url: str, **kwargs) -> httpx.Response:
    """A request to a test server, as its administrator."""
    headers = {**headers_for(url), **kwargs.pop("headers", {})}
    return CLIENT.request(method, url, headers=headers, **kwargs)


def is_problem(response, status):
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body["status"] == status and body["detail"]
    return body


@pytest.mark.parametrize("name", TRAVERSALS)
def test_names_that_are_not_names_are_refused(server, name):
    for path in (f"/v1/registry/namespaces/{name}", f"/v1/registry/datasets/{name}/x",
                 f"/v1/registry/datasets/ns/{name}/versions"):
        response = call("GET", server.url + path)
        assert 400 <= response.status_code < 500, (path, response.status_code, response.text)


def test_unknown_field_in_upload_is_refused_by_name(server):
    response = call("POST", f"{server.url}/v1/registry/dataset-uploads",
                          json={"dataset": "a/b", "format": "chat-jsonl-v1", "shards": [], "colour": "red"})
    body = is_problem(response, 422)
    assert "colour" in body["detail"]


def test_malformed_json_body(server):
    response = call("POST", f"{server.url}/v1/registry/dataset-uploads", content=b"{nope",
                          headers={"content-type": "application/json"})
    is_problem(response, 422)


def test_unknown_format_and_bad_digest(server):
    shard = {"index": 0, "path": "examples.jsonl", "sha256": "zz", "bytes": 1, "lines": 1}
    response = call("POST", f"{server.url}/v1/registry/dataset-uploads",
                          json={"dataset": "a/b", "format": "csv", "shards": [shard]})
    assert "format 'csv' is not known" in is_problem(response, 422)["detail"]
    response = call("POST", f"{server.url}/v1/registry/dataset-uploads",
                          json={"dataset": "a/b", "format": "chat-jsonl-v1", "shards": [shard]})
    assert "64 lowercase hex digits" in is_problem(response, 422)["detail"]


def test_checksum_mismatch_stores_nothing(server, ns):
    data = jsonl([chat_row(ns)])  # rows of its own: a shard the server holds is not read again
    session = open_upload(server.url, f"{ns}/d", data)
    tampered = data.replace(b"hello", b"hellO")
    response = call("PUT", f"{server.url}/v1/registry/dataset-uploads/{session['uploadId']}/shards/0", content=tampered)
    assert is_problem(response, 422)["code"] == "checksum_mismatch"
    commit = call("POST", f"{server.url}/v1/registry/dataset-uploads/{session['uploadId']}/commit", json={})
    assert "missing shard(s) 0" in is_problem(commit, 409)["detail"]
    assert call("GET", f"{server.url}/v1/registry/datasets/{ns}/d").status_code == 404


def test_longer_body_than_promised_is_refused(server, ns):
    data = jsonl([chat_row(ns)])
    session = open_upload(server.url, f"{ns}/d", data)
    response = call("PUT", f"{server.url}/v1/registry/dataset-uploads/{session['uploadId']}/shards/0", content=data * 3)
    is_problem(response, 413)


def test_server_validates_rows_itself(server, ns):
    data = jsonl([chat_row(), {"messages": [{"role": "user", "content": "q"}]}])
    session = open_upload(server.url, f"{ns}/d", data)
    response = call("PUT", f"{server.url}/v1/registry/dataset-uploads/{session['uploadId']}/shards/0", content=data)
    body = is_problem(response, 422)
    assert body["errorCount"] == 1
    assert body["errors"][0]["line"] == 2 and "last message must be an assistant message" in body["errors"][0]["reason"]


def test_unknown_upload_and_shard(server, ns):
    is_problem(call("PUT", f"{server.url}/v1/registry/dataset-uploads/nope/shards/0", content=b"x"), 404)
    session = open_upload(server.url, f"{ns}/d", jsonl([chat_row()]))
    shard = f"{server.url}/v1/registry/dataset-uploads/{session['uploadId']}/shards/5"
    is_problem(call("PUT", shard, content=b"x"), 404)


def test_registering_into_a_version_reference_is_refused(server):
    shard = {"index": 0, "path": "examples.jsonl", "sha256": "a" * 64, "bytes": 1, "lines": 1}
    response = call("POST", f"{server.url}/v1/registry/dataset-uploads",
                          json={"dataset": "a/b:v2", "format": "chat-jsonl-v1", "shards": [shard]})
    assert "without a version or alias" in is_problem(response, 422)["detail"]


def test_health(server):
    body = call("GET", f"{server.url}/v1/health").json()
    assert body["status"] == "ok" and body["database"] in ("sqlite", "postgresql")


@pytest.mark.parametrize("method, path, body", [
    ("POST", "/v1/training/runs/nosuchrun/pause", {"checkpoint": "save"}),
    ("POST", "/v1/training/runs/nosuchrun/pause", ["not", "an", "object"]),
    ("POST", "/v1/training/runs/nosuchrun/resume", None),
    ("POST", "/v1/training/runs/nosuchrun/cancel", None),
    ("POST", "/v1/training/runs/nosuchrun/branch", {"overrides": []}),
    ("POST", "/v1/training/runs/nosuchrun/branch", "text"),
    ("POST", "/v1/training/runs/nosuchrun/continue", {"steps": 0}),
    ("POST", "/v1/training/runs/nosuchrun/sweep", {"grid": {"axes": "x"}}),
    ("GET", "/v1/training/runs/nosuchrun/ancestry", None),
    ("GET", "/v1/training/snapshots/zz", None),
    ("POST", "/v1/training/snapshots/nosuchsnapshot/pin", {"kinds": "weights"}),
    ("POST", "/v1/training/snapshots/nosuchsnapshot/register", {"name": 5}),
    ("POST", "/v1/training/evaluations", ["x"]),
    ("POST", "/v1/training/evaluations", {"model": "optimize/tiny-llama-3.2", "dataset": "a/b", "grader": "vibes"}),
    ("POST", "/v1/training/evaluations", {"model": 5, "dataset": "a/b"}),
    ("GET", "/v1/training/evaluations/nosuchevaluation/predictions?limit=-1", None),
    ("POST", "/v1/training/evaluations/nosuchevaluation/retry", None),
    ("GET", "/v1/training/evaluations?phase=sleeping", None),
    ("GET", "/v1/training/projects/nosuchproject/scores", None),
    ("POST", "/v1/training/projects/nosuchproject/archive", None),
])
def test_lifecycle_branch_snapshot_and_evaluation_routes_refuse_bad_input_as_problems(server, method, path, body):
    response = call(method, server.url + path, json=body)
    assert 400 <= response.status_code < 500, (path, response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/problem+json"), response.text


def test_a_conversion_record_is_checked_and_kept_on_the_version(server, ns):
    data = jsonl([chat_row(ns)])
    shard = {"index": 0, "path": "examples.jsonl", "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
             "lines": 1}
    record = {"sourceFormat": "trl-prompt-completion", "container": "parquet", "format": "preference-jsonl-v1",
              "rows": 1, "rules": [{"rule": "'prompt' and 'completion' became one conversation", "rows": 1}]}
    url = f"{server.url}/v1/registry/dataset-uploads"
    body = {"dataset": f"{ns}/d", "format": "chat-jsonl-v1", "shards": [shard], "conversion": record}
    assert "converted to preference-jsonl-v1" in is_problem(call("POST", url, json=body), 422)["detail"]
    body["conversion"] = {**record, "sourceFormat": "csv"}
    assert "sourceFormat" in is_problem(call("POST", url, json=body), 422)["detail"]
    body["conversion"] = {**record, "format": "chat-jsonl-v1"}
    session = call("POST", url, json=body).json()
    assert call("PUT", f"{url}/{session['uploadId']}/shards/0", content=data).status_code == 201
    version = call("POST", f"{url}/{session['uploadId']}/commit", json={}).json()
    assert version["conversion"] == body["conversion"]
    assert call("GET", f"{server.url}/v1/registry/datasets/{ns}/d").json()["conversion"] == body["conversion"]


@pytest.mark.parametrize("method, path, body, where", [
    ("GET", "/v1/training/runs?project=a%00b", None, "query parameter 'project'"),
    ("GET", "/v1/training/runs/ab%00cd", None, "the path"),
    ("GET", "/v1/registry/datasets/ns/a%00b", None, "the path"),
    ("POST", "/v1/training/projects", {"name": "nulproject", "description": "a\x00b"}, "field description"),
    ("POST", "/v1/registry/dataset-uploads",
     {"dataset": "a/b", "format": "chat-jsonl-v1", "shards": [], "conversion": {"rules": [{"rule": "x\x00"}]}},
     "field conversion.rules[0].rule"),
])
def test_a_nul_character_is_refused_naming_where_on_either_store(server, method, path, body, where):
    """PostgreSQL cannot keep a NUL in text (a 500 before); SQLite could: both refuse it now, and store nothing."""
    answer = call(method, f"{server.url}{path}", json=body)
    assert f"{where} holds a NUL character" in is_problem(answer, 422)["detail"]
    assert call("GET", f"{server.url}/v1/training/projects/nulproject").status_code == 404


@pytest.mark.parametrize("action, body, words", [
    ("branch", {"snapshotId": 12}, "snapshotId must be a non-empty string, not 12"),
    ("continue", {"steps": 5, "snapshotId": ["a"]}, "snapshotId must be a non-empty string"),
    ("sweep", {"grid": {}, "restoreMode": 3}, "restoreMode must be a non-empty string"),
    ("branch", {"maxSteps": 10**30}, "maxSteps must be a positive integer of at most 10,000,000"),
    ("continue", {"steps": 1e30}, "steps must be a positive integer"),
])
def test_branch_fields_of_the_wrong_type_or_size_are_refused_by_name(server, action, body, words):
    answer = call("POST", f"{server.url}/v1/training/runs/feedface/{action}", json=body)
    assert words in is_problem(answer, 422)["detail"]


def test_a_json_body_over_the_limit_is_refused_as_too_large_declared_or_streamed(server):
    huge = json.dumps({"name": "bigproject", "description": "x" * (2 * 1024 * 1024)}).encode()
    declared = call("POST", f"{server.url}/v1/training/projects", content=huge,
                    headers={"content-type": "application/json"})
    assert "larger than the 1,048,576-byte limit" in is_problem(declared, 413)["detail"]

    def chunks():
        for start in range(0, len(huge), 65536):
            yield huge[start:start + 65536]

    streamed = call("POST", f"{server.url}/v1/training/projects", content=chunks(),
                    headers={"content-type": "application/json"})
    assert is_problem(streamed, 413)["code"] == "too_large"
    assert call("GET", f"{server.url}/v1/training/projects/bigproject").status_code == 404

@pytest.mark.parametrize("body, where", [
    (b'{"name": "surrogateproject", "description": "a\\ud800b"}', "field description"),
    (b'{"name": "surrogateproject", "\\udc00": 1}', "field \\udc00"),
    (b'"\\udfff"', "the body"),
])
def test_a_lone_surrogate_is_refused_naming_where_on_either_store(server, body, where):
    """Python's json reads an unpaired \\ud800-\\udfff escape into a string no store can keep and no answer can
    carry (a 500 on both stores before); a valid pair is one character and passes."""
    answer = call("POST", f"{server.url}/v1/training/projects", content=body,
                  headers={"content-type": "application/json"})
    assert f"{where} holds a lone surrogate" in is_problem(answer, 422)["detail"]
    assert call("GET", f"{server.url}/v1/training/projects/surrogateproject").status_code == 404
    paired = call("POST", f"{server.url}/v1/training/projects", content=b'{"name": "pairproject", "description": '
                  b'"\\ud83d\\ude00"}', headers={"content-type": "application/json"})
    assert paired.status_code in (200, 201) and paired.json()["description"] == "\U0001F600"


GOOD_DISTILLATION = {"teacher": "optimize/tiny-llama-3.2", "source": "a/b", "target": "a/c", "project": "p"}


@pytest.mark.parametrize("body, status, words", [
    (["x"], 422, "a distillation needs teacher, source and target"),
    ({**GOOD_DISTILLATION, "teacher": 5}, 422, "a distillation needs teacher (a base model or a registered model"),
    ({**GOOD_DISTILLATION, "colour": "red"}, 422, "unknown field(s): colour"),
    ({**GOOD_DISTILLATION, "temperature": True}, 422, "temperature must be a number from 0 to 2"),
    ({**GOOD_DISTILLATION, "maxTokens": 10**30}, 422, "maxTokens must be an integer from 1 to 32768"),
    ({**GOOD_DISTILLATION, "smoke": "1-2"}, 422, "--smoke entry '1-2' is not ROW:MESSAGE"),
    ({**GOOD_DISTILLATION, "thinking": "yes"}, 422, "thinking must be true or false"),
    ({**GOOD_DISTILLATION, "maxTokens": 600, "maxModelLength": 512}, 422, "leaves no room for a prompt"),
    ({**GOOD_DISTILLATION, "replicas": 9}, 422, "replicas must be an integer from 1 to 8"),
])
def test_a_distillation_request_is_refused_by_name_on_either_store_and_stores_nothing(server, body, status, words):
    answer = call("POST", f"{server.url}/v1/training/distillations", json=body)
    assert words in is_problem(answer, status)["detail"]
    assert call("GET", f"{server.url}/v1/training/distillations").json() == {"distillations": []}


@pytest.mark.parametrize("path, status, words", [
    ("/v1/training/distillations/feedface/rejections?reason=bogus", 422, "reason 'bogus' is not one"),
    ("/v1/training/distillations/feedface", 404, "feedface"),
    ("/v1/training/distillations?phase=sleeping", 422, "sleeping"),
])
def test_distillation_reads_refuse_bad_input_by_name(server, path, status, words):
    assert words in is_problem(call("GET", f"{server.url}{path}"), status)["detail"]


@pytest.mark.parametrize("body, headers, where", [
    (b'{"name": "nanproject", "description": NaN}', {"content-type": "application/json"}, "field description is NaN"),
    (b'{"name": "nanproject", "description": Infinity}', {}, "field description is Infinity"),  # no Content-Type
    (b'{"name": "nanproject", "labels": {"a": [1, -Infinity]}}', {"content-type": "application/json"},
     "field labels.a[1] is -Infinity"),
    # numbers too large for a float: Python reads them as infinity
    (b'{"name": "nanproject", "description": 1e999}', {"content-type": "application/json"},
     "field description is 1e999"),
    (b'{"name": "nanproject", "labels": {"a": [1, -1E+400]}}', {}, "field labels.a[1] is -1E+400"),
])
def test_nan_or_infinity_in_a_body_is_refused_naming_the_field_on_either_store(server, body, headers, where):
    """Python's json reads them as floats that no answer (nor PostgreSQL's JSON) can carry: refused before any route."""
    answer = is_problem(call("POST", f"{server.url}/v1/training/projects", content=body, headers=headers), 422)
    assert answer["detail"] == f"{where}, not a finite number" and "JSON has no NaN or Infinity" in answer["hint"]
    assert call("GET", f"{server.url}/v1/training/projects/nanproject").status_code == 404


@pytest.mark.parametrize("kinds", [[[[[[[]]]]]], [{"a": 1}], ["weights", 3]])
def test_pin_kinds_that_are_not_kind_names_are_refused_by_name(server, kinds):
    for action in ("pin", "unpin"):
        answer = call("POST", f"{server.url}/v1/training/snapshots/nosuchsnapshot/{action}", json={"kinds": kinds})
        body = is_problem(answer, 422)
        assert (body["detail"], body["hint"]) == ("kinds must be a list of kind names", "kinds: weights, trainingState")


def test_a_row_holding_an_escaped_nul_is_refused_naming_its_line_on_either_store(server, ns):
    """PostgreSQL keeps no NUL in text: a row holding one registered, then failed whatever stored text from it."""
    data = jsonl([chat_row(), chat_row(answer="a\x00b")])
    assert b"\\u0000" in data  # escaped, as JSON writes it
    session = open_upload(server.url, f"{ns}/d", data)
    body = is_problem(call("PUT", f"{server.url}/v1/registry/dataset-uploads/{session['uploadId']}/shards/0",
                           content=data), 422)
    assert body["errorCount"] == 1 and body["errors"][0]["line"] == 2
    assert body["errors"][0]["reason"] == ("field messages[1].content holds a NUL character (\\u0000); remove it: "
                                           "no text in a row can hold one")
    assert call("GET", f"{server.url}/v1/registry/datasets/{ns}/d").status_code == 404


def test_rows_of_a_quarantined_shard_are_gone_at_every_read_on_either_store(server, ns):
    """The read that finds a shard corrupt sets it aside (410); every later read finds it not held (410, not 500),
    and so does a list of analyses, which reads a sharded version's shards to know its examples."""
    from urllib.parse import urlsplit
    from urllib.request import url2pathname

    rows = [jsonl([chat_row(f"q{i}")]) for i in range(2)]
    shards = [{"index": i, "path": f"examples-{i:05d}.jsonl", "sha256": hashlib.sha256(data).hexdigest(),
               "bytes": len(data), "lines": 1} for i, data in enumerate(rows)]
    uploads = f"{server.url}/v1/registry/dataset-uploads"
    session = call("POST", uploads, json={"dataset": f"{ns}/q", "format": "chat-jsonl-v1", "shards": shards}).json()
    for index, data in enumerate(rows):
        assert call("PUT", f"{uploads}/{session['uploadId']}/shards/{index}", content=data).status_code == 201
    version = call("POST", f"{uploads}/{session['uploadId']}/commit", json={}).json()
    held = Path(url2pathname(urlsplit(version["objects"][1]["location"]).path))
    held.write_bytes(held.read_bytes().replace(b"q1", b"qX"))  # the same size, other bytes
    rows_url = f"{server.url}/v1/registry/datasets/{ns}/q/versions/v1/rows"
    assert is_problem(call("GET", rows_url, params={"offset": 1}), 410)["code"] == "corrupt"
    for _ in range(2):
        later = is_problem(call("GET", rows_url, params={"offset": 1}), 410)
        assert later["detail"] == f"shard sha256:{shards[1]['sha256']} of {ns}/q:v1 is not held by this server"
        assert "upload the same content again" in later["hint"]
    listed = call("GET", f"{server.url}/v1/training/datasets/analyses", params={"dataset": f"{ns}/q:v1"})
    assert "is not held by this server" in is_problem(listed, 410)["detail"]
    assert call("GET", rows_url, params={"limit": 1}).json()["items"][0]["row"] == chat_row("q0")  # still read


@pytest.mark.parametrize("overrides, words", [
    ({"method": ["grpo"]}, "overrides.method must be one of sft, dpo, grpo, gspo, not [\"grpo\"]"),
    ({"method": {"a": 1}}, "overrides.method must be one of sft, dpo, grpo, gspo"),
    ({"hyperparams": "x"}, "overrides.hyperparams must be a mapping, not \"x\""),
    ({"hyperparams": {"training": [1]}}, "overrides.hyperparams.training must be a mapping, not [1]"),
])
def test_branch_overrides_of_the_wrong_shape_are_refused_by_name(sqlite_server, completed_run, overrides, words):
    run = completed_run["run"]["runId"]
    answer = call("POST", f"{sqlite_server.url}/v1/training/runs/{run}/branch?dryRun=true",
                  json={"overrides": overrides, "maxSteps": 2})
    assert words in is_problem(answer, 422)["detail"]


def test_a_supervised_run_branched_into_grpo_takes_the_default_rl_settings(sqlite_server, completed_run):
    """Without rlHyperparams in the overrides, with the branch's length given or not: the defaults, never a 500."""
    run = completed_run["run"]["runId"]
    for extra in ({}, {"maxSteps": 2}, {"epochs": 1}):
        answer = call("POST", f"{sqlite_server.url}/v1/training/runs/{run}/branch?dryRun=true",
                      json={"overrides": {"method": "grpo", "reward": {"terms": [{"kind": "contains"}]}},
                            **extra})
        assert answer.status_code == 200, (extra, answer.text)
        assert answer.json()["branch"]["restore"] == "weights"


def test_a_snapshot_named_by_a_text_longer_than_any_id_is_not_found(sqlite_server, completed_run):
    """No id is that long: not found without asking the store (SQLite refuses a LIKE pattern past 50,000 bytes)."""
    run = completed_run["run"]["runId"]
    for action, body in (("branch", {}), ("continue", {"steps": 2})):
        answer = call("POST", f"{sqlite_server.url}/v1/training/runs/{run}/{action}?dryRun=true",
                      json={**body, "snapshotId": "x" * 100_000})
        detail = is_problem(answer, 404)["detail"]
        assert detail.startswith("snapshot 'xxxx") and len(detail) < 100, detail


WIDE_AXES = 30


def test_a_sweep_grid_too_large_is_refused_before_its_points_are_built(sqlite_server, completed_run):
    """Thirty two-valued axes are a body of a few KiB but a billion points; tens of thousands of one-valued axes are
    checked for overlap in linear time. Each answers at once (the client waits 10 s at most)."""
    run = completed_run["run"]["runId"]
    url = f"{sqlite_server.url}/v1/training/runs/{run}/sweep?dryRun=true"
    wide = {"grid": {"axes": [{"path": f"hyperparams.x{i}", "values": [1, 2]} for i in range(WIDE_AXES)]}}
    answer = call("POST", url, json=wide, timeout=10)
    problem = is_problem(answer, 400)
    assert problem["detail"] == f"the grid makes {2**WIDE_AXES} points, more than 50"
    assert problem["hint"] == "remove values or axes"
    many = {"grid": {"axes": [{"path": f"hyperparams.x{i}", "values": [1]} for i in range(15_000)]
                     + [{"path": "hyperparams.x7.y", "values": [1]}]}}
    answer = call("POST", url, json=many, timeout=10)
    assert is_problem(answer, 422)["detail"] == "axes hyperparams.x7.y and hyperparams.x7 name the same or nested paths"


def test_a_sweep_axis_path_deeper_than_any_config_field_is_refused_by_name(sqlite_server, completed_run):
    """A path of thousands of dotted parts made a point nested as deep, which the checks that walk it could not."""
    run = completed_run["run"]["runId"]
    before = call("GET", f"{sqlite_server.url}/v1/training/runs/{run}/branches").json()
    for dry in ("?dryRun=true", ""):
        answer = call("POST", f"{sqlite_server.url}/v1/training/runs/{run}/sweep{dry}",
                      json={"grid": {"axes": [{"path": "a." * 2000 + "b", "values": [1]}]}})
        problem = is_problem(answer, 422)
        assert problem["detail"] == "axis 1's path has 2001 dotted parts, more than 32"
        assert problem["hint"] == "name a field of the config document, e.g. hyperparams.optimizer.learningRate"
    assert call("GET", f"{sqlite_server.url}/v1/training/runs/{run}/branches").json() == before  # nothing submitted
