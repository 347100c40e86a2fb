"""Sessions against real servers on both stores: `akka training sessions create` prints the session hash, the same
file again answers the same session (200, `created: false`), `get` shows its first candidates; a bad line is
refused by its number and nothing is kept; the project is named, or is the limited token's one project. The file's
size limit (OPTIMIZE_SESSION_MAX_BYTES) is the sessions service's, tested there (tests/unit/test_session_limit.py)
rather than on a server started with a small limit."""

from __future__ import annotations

import hashlib
import uuid

import httpx
import pytest

from optimize.sessions.candidates import parse
from optimize.sessions.oasst1 import Oasst1Parser
from tests.session_files import canonical_records, jsonl, oasst_slice, otel_batches

pytestmark = pytest.mark.integration
ROUTE = "/v1/training/sessions"
NDJSON = {"Content-Type": "application/x-ndjson"}


@pytest.fixture
def project(cli) -> str:
    name = f"s{uuid.uuid4().hex[:10]}"
    cli.ok("training", "projects", "create", name)
    return name


def post(server_url: str, headers: dict, data: bytes, **params) -> httpx.Response:
    return httpx.post(f"{server_url}{ROUTE}", params=params, content=data, headers={**headers, **NDJSON}, timeout=60)


def expected_hash(data: bytes) -> str:
    return hashlib.sha256(b"".join(c.normalized("oasst1") for c in parse(Oasst1Parser(), data).candidates)
                          ).hexdigest()


def test_create_prints_the_hash_and_the_same_file_answers_the_same_session(cli, project, tmp_path):
    data = jsonl(oasst_slice())
    path = tmp_path / "trees.jsonl"
    path.write_bytes(data)
    text = cli.ok("training", "sessions", "create", "-f", str(path), "--source", "oasst1", "--project", project)
    session_hash = expected_hash(data)
    assert f"Created session {session_hash}" in text.out and "5 candidates from 3 message trees" in text.out
    assert "2 deleted" in text.out
    again = cli.json("training", "sessions", "create", "-f", str(path), "--source", "oasst1", "--project", project)
    assert again["sessionHash"] == session_hash and again["created"] is False
    assert again["candidates"] == 5 and again["records"] == 3 and again["skipped"] == {"deleted": 2}
    shown = cli.json("training", "sessions", "get", session_hash, "--limit", "2")
    assert shown["project"] == project and shown["source"] == "oasst1"
    assert [c["id"] for c in shown["firstCandidates"]] == ["a1", "a3"]
    assert shown["firstCandidates"][1]["messages"][-1] == {"role": "assistant",
                                                           "content": "It chains computations that carry context."}
    described = cli.ok("training", "sessions", "get", session_hash)
    assert "Das kann ich nicht wissen." in described.out


def test_otel_and_canonical_files_become_sessions_over_the_api(cli, project):
    otel = post(cli.url, cli.headers, jsonl(otel_batches()), source="otel", project=project)
    assert otel.status_code == 201, otel.text
    assert otel.json()["candidates"] == 2 and otel.json()["skipped"] == {"not_gen_ai_event": 1}
    canonical = post(cli.url, cli.headers, jsonl(canonical_records()), source="canonical", project=project)
    assert canonical.status_code == 201, canonical.text
    body = canonical.json()
    assert (body["records"], body["candidates"], body["skipped"], body["created"]) == (3, 2, {"incomplete": 1}, True)
    again = post(cli.url, cli.headers, jsonl(canonical_records()), source="canonical", project=project)
    assert again.status_code == 200 and again.json()["sessionHash"] == body["sessionHash"]


def test_a_bad_line_is_refused_by_its_number_and_nothing_is_kept(cli, project, tmp_path):
    good = jsonl(oasst_slice()[1:])
    refused = post(cli.url, cli.headers, good + b'{"message_tree_id": "t9"}\n', source="oasst1", project=project)
    assert refused.status_code == 422, refused.text
    problem = refused.json()
    assert problem["line"] == 3 and problem["detail"].startswith("line 3: the tree has no 'prompt'")
    assert "trees export" in problem["hint"]
    missing = httpx.get(f"{cli.url}{ROUTE}/{expected_hash(good)}", headers=cli.headers)
    assert missing.status_code == 404  # the lines before the bad one made no session
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"not json\n")
    result = cli("training", "sessions", "create", "-f", str(path), "--source", "oasst1", "--project", project)
    assert result.code != 0 and "line 1: is not JSON" in result.err


def test_what_is_refused_before_the_file_is_read(cli, project, tmp_path):
    data = jsonl(oasst_slice())
    assert post(cli.url, cli.headers, data, source="oasst1").status_code == 422  # no project
    assert post(cli.url, cli.headers, data, source="sharegpt", project=project).status_code == 422
    assert post(cli.url, cli.headers, data, source="oasst1", project="nosuchproject").status_code == 404
    wrong = httpx.post(f"{cli.url}{ROUTE}", params={"source": "oasst1", "project": project}, content=data,
                       headers={**cli.headers, "Content-Type": "text/csv"})
    assert wrong.status_code == 415, wrong.text
    result = cli("training", "sessions", "create", "-f", "-", "--source", "oasst1", "--project", project)
    assert result.code != 0 and "not stdin" in (result.err + result.out)
    bad_hash = httpx.get(f"{cli.url}{ROUTE}/abc", headers=cli.headers)
    assert bad_hash.status_code == 422


def test_a_token_limited_to_one_project_needs_no_project(server, cli, project):
    answer = httpx.post(f"{server.url}/v1/auth/tokens", headers=server.headers,
                        json={"name": f"lim-{uuid.uuid4().hex[:6]}", "role": "trainer", "projects": [project]})
    assert answer.status_code == 201, answer.text
    token = {"Authorization": f"Bearer {answer.json()['token']}"}
    created = post(server.url, token, jsonl(canonical_records()[:1]), source="canonical")
    assert created.status_code == 201, created.text
    assert created.json()["project"] == project and created.json()["createdBy"].startswith("lim-")
    other = post(server.url, token, jsonl(canonical_records()[:1]), source="canonical", project="elsewhere")
    assert other.status_code == 403

