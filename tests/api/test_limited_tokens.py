"""Tokens limited to projects and namespaces, against real server processes on both stores: a limited token lists
only its own projects' work and its own namespaces' datasets and models, is refused (403 naming the project or
namespace) when it names another, and finds another project's items by id as if they did not exist.

The run-level checks (runs, snapshots, logs, capacity claims) use the session's completed run on SQLite; the
filters are SQL the two stores share, and the registry and project lists cover both.
"""

from __future__ import annotations

import uuid

import httpx
import pytest

from tests.conftest import Cli, chat_row, write_jsonl

pytestmark = pytest.mark.integration


def issue(server, role: str, projects=(), namespaces=()) -> dict[str, str]:
    body = {"name": f"lim-{uuid.uuid4().hex[:6]}", "role": role}
    if projects:
        body["projects"] = list(projects)
    if namespaces:
        body["namespaces"] = list(namespaces)
    answer = httpx.post(f"{server.url}/v1/auth/tokens", headers=server.headers, json=body)
    assert answer.status_code == 201, answer.text
    return {"Authorization": f"Bearer {answer.json()['token']}", "name": body["name"]}


def get(server, path: str, headers, **params) -> httpx.Response:
    return httpx.get(f"{server.url}{path}", headers={"Authorization": headers["Authorization"]}, params=params)


@pytest.fixture(scope="module")
def two_projects(server, tmp_path_factory):
    """Projects `mine` and `theirs` with a dataset each in their own namespaces (a tag keeps them apart from
    other modules' names)."""
    tag = uuid.uuid4().hex[:6]
    names = {"mine": f"mine{tag}", "theirs": f"theirs{tag}", "shared": f"shared{tag}"}
    folder = tmp_path_factory.mktemp("limited")
    from optimize.cli.main import main

    for key, name in names.items():
        rows = write_jsonl(folder / f"{key}.jsonl", [chat_row(f"hi {key} {tag}", "hello")])
        assert main(["registry", "datasets", "register", f"{name}/chat", "-f", str(rows), "--server", server.url]) == 0
        if key != "shared":
            answer = httpx.post(f"{server.url}/v1/training/projects", headers=server.headers, json={"name": name})
            assert answer.status_code in (200, 201), answer.text
    return names


def test_a_limited_token_sees_only_its_projects_and_namespaces(server, two_projects):
    mine, theirs, shared = two_projects["mine"], two_projects["theirs"], two_projects["shared"]
    token = issue(server, "trainer", projects=[mine], namespaces=[shared])
    projects = [p["name"] for p in get(server, "/v1/training/projects", token).json()["projects"]]
    assert projects == [mine]
    datasets = {d["dataset"] for d in get(server, "/v1/registry/datasets", token).json()["datasets"]}
    assert datasets == {f"{mine}/chat", f"{shared}/chat"}  # its project's namespace and the one it names
    namespaces = {n["name"] for n in get(server, "/v1/registry/namespaces", token).json()["namespaces"]}
    assert namespaces == {mine, shared}
    assert get(server, f"/v1/registry/datasets/{mine}/chat", token).status_code == 200
    for path, named in ((f"/v1/training/projects/{theirs}", f"project '{theirs}'"),
                        (f"/v1/training/projects/{theirs}/scores", f"project '{theirs}'"),
                        (f"/v1/registry/datasets/{theirs}/chat", f"namespace '{theirs}'"),
                        (f"/v1/registry/datasets/{theirs}/chat/versions", f"namespace '{theirs}'"),
                        (f"/v1/registry/namespaces/{theirs}", f"namespace '{theirs}'"),
                        (f"/v1/registry/models/{theirs}/m", f"namespace '{theirs}'")):
        answer = get(server, path, token)
        assert answer.status_code == 403, (path, answer.text)
        assert f"token {token['name']} is limited to" in answer.json()["detail"] and named in answer.json()["detail"]
    answer = get(server, "/v1/training/runs", token, project=theirs)
    assert answer.status_code == 403
    answer = get(server, "/v1/registry/datasets", token, namespace=theirs)
    assert answer.status_code == 403
    # an unlimited token still sees everything
    everything = {p["name"] for p in get(server, "/v1/training/projects", server.headers | {"name": "admin"})
                  .json()["projects"]}
    assert {mine, theirs} <= everything


def test_a_limited_token_cannot_create_work_or_data_outside_its_limits(server, two_projects, tmp_path, capsys):
    mine, theirs = two_projects["mine"], two_projects["theirs"]
    token = issue(server, "trainer", projects=[mine])
    headers = {"Authorization": token["Authorization"]}
    answer = httpx.post(f"{server.url}/v1/training/projects", headers=headers, json={"name": f"x{mine}"})
    assert answer.status_code == 403 and f"project 'x{mine}' is outside them" in answer.json()["detail"]
    answer = httpx.post(f"{server.url}/v1/registry/dataset-uploads", headers=headers,
                        json={"dataset": f"{theirs}/more", "format": "chat-jsonl-v1",
                              "shards": [{"index": 0, "path": "examples.jsonl", "sha256": "a" * 64, "bytes": 10,
                                          "lines": 1}]})
    assert answer.status_code == 403 and f"namespace '{theirs}'" in answer.json()["detail"]
    answer = httpx.put(f"{server.url}/v1/registry/datasets/{theirs}/chat/aliases/prod", headers=headers,
                       json={"version": "v1"})
    assert answer.status_code == 403
    # the CLI, given the token, says the same and registers into the token's own namespace
    cli = Cli(capsys, server.url)
    rows = write_jsonl(tmp_path / "more.jsonl", [chat_row("more", "rows")])
    refused = cli("registry", "datasets", "register", f"{theirs}/more", "-f", str(rows),
                  "--token", token["Authorization"].split()[1])
    assert refused.code == 1 and f"namespace '{theirs}' is outside them" in refused.err
    cli.ok("registry", "datasets", "register", f"{mine}/more", "-f", str(rows),
           "--token", token["Authorization"].split()[1])


def test_another_projects_run_snapshots_logs_and_claims_are_out_of_sight(sqlite_server, completed_run):
    run_id, project = completed_run["run"]["runId"], completed_run["project"]
    other = issue(sqlite_server, "reader", projects=["nothing-here"])
    own = issue(sqlite_server, "reader", projects=[project])
    assert get(sqlite_server, f"/v1/training/runs/{run_id}", own).status_code == 200
    runs = "/v1/training/runs"
    for path in (f"{runs}/{run_id}", f"{runs}/{run_id[:8]}", f"{runs}/{run_id}/metrics", f"{runs}/{run_id}/snapshots",
                 f"{runs}/{run_id}/logs", f"{runs}/{run_id}/events", f"{runs}/{run_id}/ancestry"):
        answer = get(sqlite_server, path, other)
        assert answer.status_code == 404, (path, answer.text)  # as if it did not exist: no other project named
        assert project not in answer.text
    snapshot = get(sqlite_server, f"/v1/training/runs/{run_id}/snapshots", own).json()["snapshots"][0]["snapshotId"]
    assert get(sqlite_server, f"/v1/training/snapshots/{snapshot}", other).status_code == 404
    assert get(sqlite_server, f"/v1/training/snapshots/{snapshot}", own).status_code == 200
    assert run_id not in {r["runId"] for r in get(sqlite_server, "/v1/training/runs", other).json()["runs"]}
    assert run_id in {r["runId"] for r in get(sqlite_server, "/v1/training/runs", own).json()["runs"]}
    models = get(sqlite_server, "/v1/registry/models", other).json()["models"]
    assert not [m for m in models if m["namespace"] == project]
    capacity = get(sqlite_server, "/v1/training/capacity", other).json()
    assert all(c["project"] == "nothing-here" for c in capacity["claims"]) and capacity["projects"] == []


def test_limits_are_named_checked_and_shown(sqlite_server, capsys):
    cli = Cli(capsys, sqlite_server.url)
    made = cli.json("auth", "tokens", "create", "limited-shop", "--role", "reader", "--project", "Shop",
                    "--namespace", "data")
    assert made["projects"] == ["shop"] and made["namespaces"] == ["data"]
    listed = cli.ok("auth", "tokens", "list").out
    assert "limited-shop" in listed and "projects shop" in listed and "namespaces data" in listed
    refused = cli("auth", "tokens", "create", "bad", "--role", "admin", "--project", "shop")
    assert refused.code == 1 and "an admin token cannot be limited" in refused.err
    refused = cli("auth", "tokens", "create", "bad2", "--role", "reader", "--project", "No Spaces")
    assert refused.code == 1 and "is not a valid name" in refused.err
    whoami = httpx.get(f"{sqlite_server.url}/v1/auth/whoami",
                       headers={"Authorization": f"Bearer {made['token']}"}).json()
    assert whoami["projects"] == ["shop"] and whoami["namespaces"] == ["data"]


def test_a_limited_token_cannot_read_the_deployment_s_metrics(server, two_projects):
    limited = issue(server, "reader", projects=[two_projects["mine"]])
    refused = get(server, "/metrics", limited)
    assert refused.status_code == 403 and "cannot read the deployment's metrics" in refused.json()["detail"]
    assert get(server, "/metrics", issue(server, "reader")).status_code == 200
