"""Archiving and unarchiving a training project through the CLI and the API against a real server and a real
worker: refused while runs are unfinished (naming each), then hidden from lists with its runs, readable, closed to
new work until unarchived; the registry namespace of the same name is separate state and the answer says so."""

from __future__ import annotations

import re
import uuid

import httpx
import pytest

from tests.conftest import Cli
from tests.integration.test_run_lifecycle import wait_until
from tests.run_fixtures import capitals_project, plan, write_plan

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def project(sqlite_server, tmp_path_factory):
    """A project of its own (the server is shared) with a chat dataset in its registry namespace."""
    return capitals_project(sqlite_server.url, tmp_path_factory.mktemp("archive"), "arch")


def long_plan(name: str) -> dict:
    """A run that would train far longer than the test: it is cancelled, never left to finish."""
    document = plan(name, "chat")
    document["config"]["hyperparams"]["training"]["maxSteps"] = 5000
    document["execution"]["saveEvery"] = 5000
    return document


def start(cli: Cli, project, document: dict) -> str:
    return cli.json("training", "runs", "start", "-f", write_plan(project["tmp"], document), "--force")["runId"]


def run_ids(cli: Cli, *args: str) -> dict[str, dict]:
    return {r["runId"]: r for r in cli.json("training", "runs", "list", *args)["runs"]}


def test_a_project_is_archived_once_its_work_ends_and_unarchived(project, sqlite_server, capsys):
    cli, client, name = Cli(capsys, sqlite_server.url), project["client"], project["name"]

    # work in progress: the first run holds the only cpu device, the second waits for it
    first = start(cli, project, long_plan(name))
    wait_until(client, first, lambda r: r["phase"] in ("PREPARING", "TRAINING"))
    second = start(cli, project, long_plan(name))
    assert client.get(f"/v1/training/runs/{second}").json()["phase"] == "QUEUED"

    refused = cli("training", "projects", "archive", name)
    assert refused.code == 1
    assert re.search(rf"training project '{name}' has work in progress: run {first[:12]} \((PREPARING|TRAINING)\), "
                     rf"run {second[:12]} \(QUEUED\); it cannot be archived", refused.err), refused.err
    assert "akka training runs cancel RUN" in refused.err and "let them finish" in refused.err
    answer = client.post(f"/v1/training/projects/{name}/archive")
    assert answer.status_code == 400 and answer.json()["code"] == "refused"
    assert answer.json()["inProgress"][1] == f"run {second[:12]} (QUEUED)"
    assert not client.get(f"/v1/training/projects/{name}").json()["archived"]  # nothing changed

    cli.ok("training", "runs", "cancel", second, "--force")
    assert client.post(f"/v1/training/runs/{first}/cancel").status_code == 202

    # archived: the registry namespace of the same name stays open, and the answer says so
    text = cli.ok("training", "projects", "archive", name).out
    assert (f"Project {name} archived. Its registry namespace {name}/ stays open: its models resolve and new versions "
            f"can still register there; archive it too with: akka registry namespaces archive {name}") in text
    assert f"unarchive it with: akka training projects unarchive {name}" in text
    again = client.post(f"/v1/training/projects/{name}/archive")
    assert again.status_code == 200
    body = again.json()
    assert body["archived"] and not body["changed"] and body["runs"] == 2
    assert body["registryNamespace"] == {"name": name, "exists": True, "archived": False}
    assert f"Project {name} was already archived." in cli.ok("training", "projects", "archive", name).out

    # left out of lists with its runs; shown and marked with --archived; its runs listed when it is named
    assert name not in [p["name"] for p in cli.json("training", "projects", "list")["projects"]]
    listed = {p["name"]: p for p in cli.json("training", "projects", "list", "--archived")["projects"]}
    assert listed[name]["archived"]
    assert f"{name} (archived)" in cli.ok("training", "projects", "list", "--archived").out
    assert name not in [p["name"] for p in client.get("/v1/training/projects").json()["projects"]]
    assert name in [p["name"] for p in client.get("/v1/training/projects?archived=true").json()["projects"]]

    assert not {first, second} & set(run_ids(cli))
    everything = run_ids(cli, "--archived")
    assert everything[first]["projectArchived"] and everything[second]["projectArchived"]
    assert f"{name} (archived)" in cli.ok("training", "runs", "list", "--archived").out
    assert set(run_ids(cli, "--project", name)) == {first, second}
    assert f"{name} (archived)" in cli.ok("training", "runs", "list", "--project", name).out
    assert {r["runId"] for r in client.get("/v1/training/runs", params={"project": name}).json()["runs"]} == \
        {first, second}
    assert first not in {r["runId"] for r in client.get("/v1/training/runs").json()["runs"]}
    assert first in {r["runId"] for r in client.get("/v1/training/runs?archived=true").json()["runs"]}

    # still readable, closed to new work
    assert cli.json("training", "projects", "get", name)["archived"]
    assert f"{name} (archived)" in cli.ok("training", "projects", "get", name).out
    assert client.get(f"/v1/training/runs/{first}").status_code == 200
    path = write_plan(project["tmp"], plan(name, "chat"))
    new = cli("training", "runs", "start", "-f", path, "--force")
    assert new.code == 1
    assert f"training project '{name}' is archived and takes no new work" in new.err
    assert f"akka training projects unarchive {name}" in new.err
    assert client.post("/v1/training/runs", json=plan(name, "chat")).status_code == 400
    assert set(run_ids(cli, "--project", name)) == {first, second}  # nothing stored

    # unarchived: back in the lists, open to new work (checked by a dry run: nothing trains)
    assert f"Project {name} unarchived; it takes new work again." in cli.ok("training", "projects", "unarchive",
                                                                           name).out
    assert name in [p["name"] for p in cli.json("training", "projects", "list")["projects"]]
    restored = run_ids(cli)
    assert first in restored and not restored[first]["projectArchived"]
    assert cli.ok("training", "runs", "start", "-f", path, "--dry-run").code == 0
    twice = client.post(f"/v1/training/projects/{name}/unarchive")
    assert twice.status_code == 200 and not twice.json()["changed"] and not twice.json()["archived"]
    assert f"Project {name} was not archived." in cli.ok("training", "projects", "unarchive", name).out


def test_a_run_into_an_archived_registry_namespace_is_refused_at_submission(project, sqlite_server, capsys):
    cli, client, name = Cli(capsys, sqlite_server.url), project["client"], project["name"]
    cli.ok("registry", "namespaces", "archive", name)
    try:
        before = set(run_ids(cli, "--project", name))
        refused = cli("training", "runs", "start", "-f", write_plan(project["tmp"], plan(name, "chat")), "--force")
        assert refused.code == 1
        assert f"namespace '{name}' is archived; it takes no new versions" in refused.err
        assert f"akka registry namespaces unarchive {name}" in refused.err
        assert set(run_ids(cli, "--project", name)) == before  # nothing stored

        # the project's archive and unarchive answers say the namespace is archived
        archived = cli.json("training", "projects", "archive", name)
        assert archived["registryNamespace"] == {"name": name, "exists": True, "archived": True}
        cli.ok("training", "projects", "unarchive", name)
        text = cli.ok("training", "projects", "archive", name).out
        assert f"Project {name} archived. Its registry namespace {name}/ is archived too." in text
        cli.ok("training", "projects", "unarchive", name)
        cli.ok("training", "projects", "archive", name)
        text = cli.ok("training", "projects", "unarchive", name).out
        assert f"Its registry namespace {name}/ is still archived, so runs that register there are refused" in text
        assert f"akka registry namespaces unarchive {name}" in text
    finally:
        cli.ok("registry", "namespaces", "unarchive", name)
    assert client.get(f"/v1/training/projects/{name}").json()["archived"] is False


def test_a_project_without_a_registry_namespace_says_so(sqlite_server, capsys):
    cli = Cli(capsys, sqlite_server.url)
    name = f"arch{uuid.uuid4().hex[:8]}"
    cli.ok("training", "projects", "create", name)
    text = cli.ok("training", "projects", "archive", name).out
    assert f"Project {name} archived." in text and f"It has no registry namespace {name}/ yet" in text
    space = cli.json("training", "projects", "archive", name)["registryNamespace"]
    assert space == {"name": name, "exists": False, "archived": False}  # created by the first registration into it
    assert cli.json("training", "projects", "unarchive", name)["changed"]


def test_archiving_an_unknown_project_is_not_found(sqlite_server, capsys):
    cli = Cli(capsys, sqlite_server.url)
    missing = cli("training", "projects", "archive", "nosuchproject")
    assert missing.code == 1 and "training project 'nosuchproject' does not exist" in missing.err
    for action in ("archive", "unarchive"):
        answer = httpx.post(f"{sqlite_server.url}/v1/training/projects/nosuchproject/{action}",
                            headers=sqlite_server.headers)
        assert answer.status_code == 404 and answer.json()["code"] == "not_found"
