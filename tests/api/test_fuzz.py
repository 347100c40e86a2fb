"""A bounded, deterministic fuzz over every operation the server's own `/openapi.json` lists, against a real server
process on each store (SQLite and PostgreSQL): bad input never answers 5xx and never leaks a stack trace.

For each operation the cases are generated from its documented parameters and request body, then at most
`PER_OPERATION` of them are picked by a generator seeded with the operation's name (so a run repeats exactly),
taking one case of each kind in turn so that every kind an operation admits is tried:

- path parameters (one at a time, the others plausible): traversal strings (`..%2F..%2Fetc`, `%2e%2e`, a literal
  `..` segment sent byte for byte), a very long string, a lone surrogate and odd Unicode (percent-encoded: CESU
  bytes, an overlong slash, a right-to-left override, a noncharacter), NUL, huge numbers (`1e30`, `10**30`) and
  negative numbers;
- query parameters the operation declares: a wrong type, huge and negative numbers, empty, a lone surrogate, NUL,
  a very long string;
- JSON bodies: not JSON, a JSON array or scalar instead of an object, too deeply nested, an unknown field, a lone
  surrogate (`"\\ud800"` written as raw JSON text, which Python's json would not produce), and each declared
  property (top level and one level down) given a wrong type, 1e30, 10**30, -1, a bare NaN or -Infinity, a 10 KB
  string or lists nested in lists, over a plausible body (its required fields filled by their documented types);
- streamed bodies (dataset shards): bytes that are not JSON lines, invalid UTF-8.

Plausible values are real where that is cheap (a namespace with a committed dataset, an open upload session, a
project, a token), so the cases reach past the first lookup. Nothing here starts work: a plausible body names a
base model and datasets that do not exist. Streams (server-sent events) are read with a short timeout and only their
status and first bytes checked. All failures are collected and reported together.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import random
import time
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

pytestmark = pytest.mark.integration

PER_OPERATION = 10  # cases per operation (path, query, streamed body)
PER_BODY_OPERATION = 12  # with a JSON body: its 8 fixed cases, then up to this many more
METHODS = ("get", "put", "post", "patch", "delete")
LEAKS = ("Traceback", 'File "/')
HUGE = str(10**30)
TEN_KB = "x" * 10_240

PATH_VALUES = {
    "traversal-encoded-slash": "..%2F..%2Fetc",
    "traversal-encoded-dots": "%2e%2e",
    "traversal-backslash": "..%5C..%5Cwindows",
    "very-long": "a" * 4_000,
    "lone-surrogate": "%ED%A0%80",
    "overlong-slash": "%C0%AF",
    "rtl-override": "x%E2%80%AEtxt.exe",
    "noncharacter": "%EF%BF%BF%F0%9F%98%80",
    "nul": "a%00b",
    "huge-float": "1e30",
    "huge-int": HUGE,
    "negative": "-1",
    "space-and-colon": "a%20b:c@sha256:zz",
}
QUERY_VALUES = {
    "wrong-type": "not-a-value%7B%7D",
    "huge-float": "1e30",
    "huge-int": HUGE,
    "negative": "-1",
    "empty": "",
    "lone-surrogate": "%ED%A0%80",
    "nul": "x%00",
    "very-long": "q" * 4_000,
}


@dataclass
class Case:
    kind: str  # path / query / body / stream-body: the round-robin key
    name: str  # what this case does, for the report
    path: str  # the raw path (percent-encoded as it goes on the wire) and query
    content: bytes | None = None
    content_type: str | None = None
    raw: bool = False  # sent byte for byte (http.client), for paths an HTTP client would normalize


# --- the documented shapes ---------------------------------------------------------------------------------------


class Schemas:
    def __init__(self, document: dict) -> None:
        self.components = document.get("components", {}).get("schemas", {})

    def resolve(self, schema: dict | None) -> dict:
        """The schema itself: `$ref` followed, the first non-null branch of anyOf/oneOf/allOf taken."""
        schema = schema or {}
        for _ in range(20):
            if "$ref" in schema:
                schema = self.components.get(schema["$ref"].rsplit("/", 1)[-1], {})
                continue
            for key in ("anyOf", "oneOf", "allOf"):
                branches = [b for b in schema.get(key, []) if b.get("type") != "null"]
                if branches:
                    schema = branches[0]
                    break
            else:
                return schema
        return schema

    def kind(self, schema: dict | None) -> str:
        resolved = self.resolve(schema)
        if "enum" in resolved:
            return "enum"
        if "const" in resolved:
            return "enum"
        return resolved.get("type") or ("object" if "properties" in resolved else "any")

    def plausible(self, schema: dict | None, tag: str, depth: int = 0) -> Any:
        """A value of the documented type: what a careless but well-meaning client might send."""
        resolved = self.resolve(schema)
        kind = self.kind(resolved)
        if kind == "enum":
            return (resolved.get("enum") or [resolved.get("const")])[0]
        if kind == "string":
            return tag
        if kind in ("integer", "number"):
            return max(1, int(resolved.get("minimum", 1)))
        if kind == "boolean":
            return False
        if kind == "array":
            return []
        if kind == "object" and depth < 2:
            return {name: self.plausible(sub, tag, depth + 1) for name, sub in resolved.get("properties", {}).items()
                    if name in resolved.get("required", [])}
        if kind == "object":
            return {}
        return tag


def wrong_values(kind: str) -> list[tuple[str, Any]]:
    """Values of the wrong type, or of the right type but absurd size, for a property of `kind`."""
    if kind == "string" or kind == "enum":
        return [("number-for-string", 12345), ("object-for-string", {"a": 1}), ("huge-float", 1e30),
                ("negative", -1), ("10kb-string", TEN_KB), ("array-for-string", ["x"])]
    if kind in ("integer", "number"):
        return [("object-for-number", {"a": 1}), ("huge-float", 1e30), ("huge-int", 10**30), ("negative", -1),
                ("10kb-string", TEN_KB), ("string-for-number", "12"), ("bool-for-number", True),
                ("nan", float("nan")), ("infinity", float("-inf"))]  # json.dumps writes them bare
    if kind == "boolean":
        return [("string-for-bool", "yes"), ("number-for-bool", 2), ("10kb-string", TEN_KB)]
    if kind == "array":
        return [("string-for-array", "x"), ("huge-items", [1e30, 10**30, -1]), ("object-for-array", {"a": 1}),
                ("10kb-item", [TEN_KB]), ("nested-lists", [[[[[]]]]]), ("object-items", [{"a": 1}])]
    if kind == "object":
        return [("array-for-object", [1]), ("string-for-object", "x"), ("huge-float", 1e30), ("negative", -1)]
    return [("huge-float", 1e30), ("10kb-string", TEN_KB), ("negative", -1), ("object", {"a": 1})]


# --- the cases of one operation ----------------------------------------------------------------------------------


class Operation:
    def __init__(self, method: str, template: str, spec: dict, schemas: Schemas, plausible: dict[str, str]) -> None:
        self.method = method
        self.template = template
        self.spec = spec
        self.schemas = schemas
        self.params = spec.get("parameters", [])
        self.path_params = [p["name"] for p in self.params if p["in"] == "path"]
        self.query_params = [p for p in self.params if p["in"] == "query"]
        content = spec.get("requestBody", {}).get("content", {})
        self.json_schema = content.get("application/json", {}).get("schema") if "application/json" in content \
            else None
        self.streamed = next((media for media in content if media != "application/json"), None)
        self.streams = any("text/event-stream" in answer.get("content", {})
                           for answer in spec.get("responses", {}).values())
        self.plausible_values = plausible

    def label(self) -> str:
        return f"{self.method} {self.template}"

    def path(self, overrides: dict[str, str] | None = None) -> str:
        path = self.template
        for name in self.path_params:
            value = (overrides or {}).get(name)
            if value is None:
                value = self.plausible_values.get(f"{self.template}:{name}") or self.plausible_values.get(name, "fz0")
            path = path.replace("{" + name + "}", value)
        return path

    def base_body(self) -> dict:
        body = self.schemas.plausible(self.json_schema, self.plausible_values.get("tag", "fz"))
        return body if isinstance(body, dict) else {}

    def properties(self) -> list[tuple[tuple[str, ...], dict]]:
        """Each documented body property as a path of names, one level down into objects with properties."""
        found: list[tuple[tuple[str, ...], dict]] = []
        top = self.schemas.resolve(self.json_schema)
        for name, sub in top.get("properties", {}).items():
            found.append(((name,), sub))
            inner = self.schemas.resolve(sub)
            for inner_name, inner_sub in inner.get("properties", {}).items():
                found.append(((name, inner_name), inner_sub))
        return found

    def cases(self) -> list[Case]:
        rng = random.Random(f"fuzz {self.label()}")
        groups: dict[str, list[Case]] = {}
        for name in self.path_params:
            for label, value in PATH_VALUES.items():
                groups.setdefault(f"path:{name}", []).append(
                    Case("path", f"path {name}={label}", self.path({name: value}), *self._plain_body()))
            groups[f"path:{name}"].append(
                Case("path", f"path {name}=literal ..", self.path({name: "../.."}), *self._plain_body(), raw=True))
        for param in self.query_params:
            for label, value in QUERY_VALUES.items():
                groups.setdefault(f"query:{param['name']}", []).append(
                    Case("query", f"query {param['name']}={label}", f"{self.path()}?{param['name']}={value}",
                         *self._plain_body()))
        if self.json_schema is not None:
            groups["body"] = self._property_cases(rng)
        if self.streamed:
            groups["stream-body"] = [
                Case("stream-body", "streamed not-jsonl", self.path(), b"not json at all\n\x00\xff", self.streamed),
                Case("stream-body", "streamed invalid utf-8", self.path(), b'{"messages": "\xed\xa0\x80"}\n',
                     self.streamed),
                Case("stream-body", "streamed empty", self.path(), b"", self.streamed),
            ]
        if not groups:  # nothing to vary: call it once as is (with a stray query and body it does not declare)
            groups["plain"] = [Case("plain", "as documented, stray query", f"{self.path()}?x={HUGE}",
                                    *self._plain_body())]
        for cases in groups.values():
            rng.shuffle(cases)
        picked: list[Case] = []
        budget = PER_OPERATION
        if self.json_schema is not None:  # a body's fixed cases always; its properties then share the budget
            picked = self._fixed_body_cases()
            budget = len(picked) + PER_BODY_OPERATION
        # one of each group in turn until the budget is spent
        while len(picked) < budget and any(groups.values()):
            for key in sorted(groups):
                if groups[key] and len(picked) < budget:
                    picked.append(groups[key].pop(0))
        return picked

    def _plain_body(self) -> tuple[bytes | None, str | None]:
        """The body sent with path and query cases: a plausible one where the operation reads JSON."""
        if self.json_schema is not None:
            return json.dumps(self.base_body()).encode(), "application/json"
        return None, None

    def _send(self, name: str, document: Any) -> Case:
        return Case("body", name, self.path(), json.dumps(document).encode(), "application/json")

    def _fixed_body_cases(self) -> list[Case]:
        """What every JSON body is tried with: not JSON, not an object, too deep, unknown fields, lone surrogates."""
        path, base, send = self.path(), self.base_body(), self._send
        rng = random.Random(f"fuzz surrogates {self.label()}")
        fixed = [
            Case("body", "not JSON", path, b"{nope", "application/json"),
            send("JSON array instead of an object", [base]),
            send("JSON string instead of an object", "x"),
            Case("body", "deeply nested", path, b"[" * 5_000 + b"]" * 5_000, "application/json"),
            send("unknown field", {**base, "fuzzUnknownField": 1}),
        ]
        strings = [(names, sub) for names, sub in self.properties()
                   if self.schemas.kind(sub) in ("string", "enum")]
        if strings:
            names, _ = rng.choice(strings)
            document = _set(base, names, "\x01SURROGATE\x01")
            raw = json.dumps(document).replace('"\\u0001SURROGATE\\u0001"', '"a\\ud800b"')
            fixed.append(Case("body", f"lone surrogate in {'.'.join(names)}", path, raw.encode(), "application/json"))
        else:
            raw = json.dumps({**base, "fuzzUnknownField": "\x01S\x01"}).replace('"\\u0001S\\u0001"', '"\\udfff"')
            fixed.append(Case("body", "lone surrogate in an unknown field", path, raw.encode(), "application/json"))
        keyed = json.dumps({**base, "fuzz\x01K\x01": 1}).replace("fuzz\\u0001K\\u0001", "\\udc00")
        fixed.append(Case("body", "lone surrogate in a key", path, keyed.encode(), "application/json"))
        return fixed

    def _property_cases(self, rng: random.Random) -> list[Case]:
        """Each documented property (one level down too) given one wrong value, over the plausible body."""
        base = self.base_body()
        cases = []
        for names, sub in self.properties():
            label, value = rng.choice(wrong_values(self.schemas.kind(sub)))
            cases.append(self._send(f"{'.'.join(names)}={label}", _set(base, names, value)))
        return cases


def _set(document: dict, names: tuple[str, ...], value: Any) -> dict:
    """A copy of `document` with the property at `names` set to `value` (objects on the way made as needed)."""
    copy = json.loads(json.dumps(document))
    here = copy
    for name in names[:-1]:
        if not isinstance(here.get(name), dict):
            here[name] = {}
        here = here[name]
    here[names[-1]] = value
    return copy


# --- sending and judging ---------------------------------------------------------------------------------------


def send(client: httpx.Client, base: str, headers: dict[str, str], operation: Operation, case: Case
         ) -> tuple[int, str]:
    request_headers = dict(headers)
    if case.content_type:
        request_headers["content-type"] = case.content_type
    if case.raw:
        return _send_raw(base, operation.method, case.path, request_headers, case.content)
    if operation.streams and operation.method == "GET":
        with client.stream(operation.method, base + case.path, headers=request_headers,
                           timeout=httpx.Timeout(5, read=2)) as answer:
            text = b""
            try:
                for chunk in answer.iter_bytes():
                    text += chunk
                    if len(text) > 4_096:
                        break
            except httpx.ReadTimeout:
                pass  # a live stream: its status and first bytes are what is judged
            return answer.status_code, text.decode("utf-8", "replace")
    answer = client.request(operation.method, base + case.path, headers=request_headers, content=case.content)
    return answer.status_code, answer.text


def _send_raw(base: str, method: str, path: str, headers: dict[str, str], content: bytes | None) -> tuple[int, str]:
    parts = urlsplit(base)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        connection.request(method, path, body=content, headers=headers)
        answer = connection.getresponse()
        return answer.status, answer.read(65_536).decode("utf-8", "replace")
    finally:
        connection.close()


def judge(status: int, text: str) -> str | None:
    if status >= 500:
        return "5xx"
    leaked = [marker for marker in LEAKS if marker in text]
    return f"leaks {leaked}" if leaked else None


# --- plausible values: real resources, so cases reach past the first lookup ------------------------------------


def real_resources(url: str, headers: dict[str, str]) -> dict[str, str]:
    tag = f"fz{uuid.uuid4().hex[:8]}"
    values: dict[str, str] = {"tag": tag, "namespace": tag, "name": "d", "selector": "v1", "alias": "latest",
                              "index": "0", "path": "adapter_config.json"}
    # rows of this module's own (its tag in them): content addressing makes a shard another test uploads answer
    # "already held" if these were the same bytes
    row = json.dumps({"messages": [{"role": "user", "content": f"hi {tag}"},
                                   {"role": "assistant", "content": "hello"}]})
    data = (row + "\n").encode()
    shard = {"index": 0, "path": "examples.jsonl", "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
             "lines": 1}
    with httpx.Client(headers=headers, timeout=30) as client:
        opened = client.post(f"{url}/v1/registry/dataset-uploads",
                             json={"dataset": f"{tag}/d", "format": "chat-jsonl-v1", "shards": [shard]})
        assert opened.status_code == 200, opened.text
        upload = opened.json()["uploadId"]
        sent = client.put(f"{url}/v1/registry/dataset-uploads/{upload}/shards/0", content=data,
                          headers={"content-type": "application/x-ndjson"})
        assert sent.status_code in (200, 201), sent.text
        committed = client.post(f"{url}/v1/registry/dataset-uploads/{upload}/commit", json={})
        assert committed.status_code == 200, committed.text
        # an open session for the shard and commit routes (a second dataset, so it is not the same content)
        other = (row.replace("hello", "hey") + "\n").encode()
        shard = {**shard, "sha256": hashlib.sha256(other).hexdigest(), "bytes": len(other)}
        opened = client.post(f"{url}/v1/registry/dataset-uploads",
                             json={"dataset": f"{tag}/open", "format": "chat-jsonl-v1", "shards": [shard]})
        assert opened.status_code == 200, opened.text
        values["upload_id"] = opened.json()["uploadId"]
        project = client.post(f"{url}/v1/training/projects", json={"name": f"{tag}p"})
        assert project.status_code in (200, 201), project.text
        values["/v1/training/projects/{name}:name"] = f"{tag}p"
        token = client.post(f"{url}/v1/auth/tokens", json={"name": f"{tag}-fuzz", "role": "reader"})
        assert token.status_code == 201, token.text
        values["token_id"] = token.json().get("tokenId") or token.json().get("id") or "fz0"
    return values


def operations(url: str, headers: dict[str, str], plausible: dict[str, str]) -> list[Operation]:
    answer = httpx.get(f"{url}/openapi.json", headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    document = answer.json()
    schemas = Schemas(document)
    return [Operation(method.upper(), path, spec, schemas, plausible)
            for path, item in document["paths"].items() for method, spec in item.items() if method in METHODS]


def fresh_client() -> httpx.Client:
    """A client that opens a connection per request: a server that drops one after a failure cannot make the next
    case fail (and each case costs a few ms, not the ~40 ms a kept-alive connection to the server takes)."""
    return httpx.Client(timeout=30, limits=httpx.Limits(max_keepalive_connections=0))


def test_no_operation_answers_5xx_or_leaks_a_traceback(server):
    plausible = real_resources(server.url, server.headers)
    found = operations(server.url, server.headers, plausible)
    assert len(found) > 50, "the server's /openapi.json lists fewer operations than it serves"
    failures: list[str] = []
    sent = 0
    started = time.monotonic()
    client = fresh_client()
    try:
        for operation in found:
            cases = operation.cases()
            assert cases, f"{operation.label()}: no case generated"  # nothing is skipped silently
            for case in cases:
                try:
                    status, text = send(client, server.url, server.headers, operation, case)
                except httpx.TransportError:
                    # a kept-alive connection the server dropped after an earlier failure (reported as such):
                    # this case is sent again on a new one
                    client.close()
                    client = fresh_client()
                    try:
                        status, text = send(client, server.url, server.headers, operation, case)
                    except (httpx.HTTPError, OSError) as error:
                        failures.append(f"{operation.method} {operation.template} [{case.name}]: no answer "
                                        f"({error!r})")
                        continue
                sent += 1
                problem = judge(status, text)
                if problem:
                    failures.append(f"{operation.method} {operation.template} [{case.name}] {status} {problem}: "
                                    f"{text[:200]!r}")
    finally:
        client.close()
    elapsed = time.monotonic() - started
    assert server.process.poll() is None, "the server exited during the fuzz"
    assert not failures, (f"{len(failures)} of {sent} fuzz requests over {len(found)} operations failed "
                          f"({elapsed:.0f} s):\n" + "\n".join(failures))


# --- deep leaves: every leaf of a valid body of the important write routes, replaced by hostile values ------------

DEEP_MARK = "\x01DEEP\x01"  # stands for a raw JSON token json.dumps cannot write (1e999, a lone surrogate)
DEEP_VALUES: list[tuple[str, Any]] = [
    ("1e999", (DEEP_MARK, "1e999")),
    ("2**64", 2**64),
    ("nested lists", [[[1]], [[]]]),
    ("lone surrogate", (DEEP_MARK, '"a\\ud800b"')),
    ("NUL", "a\x00b"),
    ("-1", -1),
    ("object", {"x": {}}),
]


def deep_leaves(document: Any, where: tuple = ()) -> list[tuple]:
    """The path of every value inside `document` (objects and lists themselves included), depth first."""
    found = [where] if where else []
    if isinstance(document, dict):
        for key, value in document.items():
            found += deep_leaves(value, (*where, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            found += deep_leaves(value, (*where, index))
    return found


def deep_body(document: Any, where: tuple, value: Any) -> bytes:
    copy = json.loads(json.dumps(document))
    holder = copy
    for step in where[:-1]:
        holder = holder[step]
    raw = None
    if isinstance(value, tuple):
        value, raw = value
    holder[where[-1]] = value
    text = json.dumps(copy)
    return (text.replace(json.dumps(DEEP_MARK), raw) if raw else text).encode()


def deep_failures(url: str, headers: dict[str, str], routes: list[tuple[str, str, dict]], after=None) -> list[str]:
    """Each route's valid body sent with each leaf replaced by each of DEEP_VALUES (and left out); the requests
    that answered 5xx or leaked a traceback. `after(path, status, answer)` undoes what an accepted one started."""
    failures: list[str] = []
    with fresh_client() as client:
        for method, path, document in routes:
            for where in deep_leaves(document):
                for name, value in DEEP_VALUES:
                    answer = client.request(method, url + path, headers={**headers, "content-type": "application/json"},
                                            content=deep_body(document, where, value))
                    problem = judge(answer.status_code, answer.text)
                    if problem:
                        failures.append(f"{method} {path} {'.'.join(map(str, where))}={name}: {answer.status_code} "
                                        f"{problem}: {answer.text[:200]!r}")
                    if after and answer.status_code < 300:
                        after(path, answer)
    return failures


def test_every_leaf_of_a_valid_write_body_replaced_by_a_hostile_value_answers_no_5xx(server, tmp_path, monkeypatch):
    from optimize.cli.main import main as cli
    from tests.conftest import from_standin
    from tests.run_fixtures import MODEL, capitals_project, plan

    project = capitals_project(server.url, tmp_path, "deep")["name"]
    client = httpx.Client(base_url=server.url, headers=server.headers, timeout=60)
    client.post(f"/v1/training/base-models/{MODEL}/select", json=from_standin(MODEL)).raise_for_status()
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "reward.py").write_text("def compute_score(prompt_messages, completion_text, fields):\n    return 1.0\n")
    monkeypatch.setenv("OPTIMIZE_TOKEN", server.token)
    assert cli(["registry", "bundles", "register", f"{project}/scorer", "-f", str(bundle), "--server", server.url]) == 0
    messages = [{"role": "user", "content": "hi"}]
    grpo = {"kind": "run", "project": project, "baseModel": MODEL,
            "config": {"dataset": "chat:latest", "method": "grpo", "maxSeqLength": 256,
                       "rlHyperparams": {"optimizer": {"learningRate": 0.01}, "generations": 4,
                                         "training": {"maxSteps": 2, "batchSize": 4}},
                       "reward": {"terms": [{"kind": "regex", "pattern": "^a", "name": "starts"},
                                            {"kind": "rule", "bundle": f"{project}/scorer"}]}},
            "execution": {"deviceProfile": "cpu", "stopWhen": {"rewardDropBelow": 0.1}}}
    routes = [
        ("POST", "/v1/training/runs?dryRun=true", plan(project, "chat:latest")),
        ("POST", "/v1/training/runs?dryRun=true", grpo),
        ("POST", "/v1/training/evaluations", {"model": MODEL, "dataset": f"{project}/chat:latest",
                                              "project": project, "grader": "exact", "rows": 2, "maxNewTokens": 2}),
        ("POST", f"/v1/registry/bundles/{project}/scorer/check", {"dataset": f"{project}/chat:latest",
                                                                 "samples": 1, "function": "reward"}),
        ("POST", "/v1/chat/completions", {"model": MODEL, "messages": messages, "max_tokens": 2, "stop": ["x"],
                                          "temperature": 0.5}),
    ]

    def cancel(path: str, answer: httpx.Response) -> None:
        # an evaluation a hostile value did not stop would take the CPU for the rest of the test
        if path.endswith("/evaluations"):
            client.post(f"/v1/training/evaluations/{answer.json()['evaluationId']}/cancel")

    started = time.monotonic()
    failures = deep_failures(server.url, server.headers, routes, after=cancel)
    assert not failures, f"{len(failures)} deep-leaf requests failed ({time.monotonic() - started:.0f} s):\n" + \
        "\n".join(failures)


def test_every_leaf_of_a_valid_branch_body_replaced_by_a_hostile_value_answers_no_5xx(sqlite_server, completed_run):
    run = completed_run["run"]["runId"]
    routes = [
        ("POST", f"/v1/training/runs/{run}/branch?dryRun=true",
         {"restoreMode": "weights", "maxSteps": 2,
          "overrides": {"method": "grpo", "reward": {"terms": [{"kind": "length", "target": 20}]},
                        "hyperparams": {"optimizer": {"learningRate": 0.02}}}}),
        ("POST", f"/v1/training/runs/{run}/continue?dryRun=true", {"steps": 2, "overrides": {"maxSeqLength": 128}}),
        ("POST", f"/v1/training/runs/{run}/sweep?dryRun=true",
         {"grid": {"axes": [{"path": "hyperparams.optimizer.learningRate", "values": [0.01, 0.02]}]}}),
    ]
    failures = deep_failures(sqlite_server.url, sqlite_server.headers, routes)
    assert not failures, f"{len(failures)} deep-leaf requests failed:\n" + "\n".join(failures)
