"""A project's standing evaluation through the API and the CLI, on SQLite and PostgreSQL: set, shown by the project,
set again (nothing changes), cleared; and each refusal naming the field and what to change, with nothing kept."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.conftest import Cli, chat_row, headers_for, pair_row, write_jsonl

pytestmark = pytest.mark.integration


def put(url: str, project: str, body) -> httpx.Response:
    return httpx.put(f"{url}/v1/training/projects/{project}/evaluation", headers=headers_for(url), json=body,
                     timeout=30)


def problem(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    return response.json()


@pytest.fixture
def project(server, ns, tmp_path, capsys) -> str:
    """A project with a held-out chat dataset and a dataset of pairs."""
    cli = Cli(capsys, server.url)
    cli.ok("training", "projects", "create", ns)
    rows = [chat_row("Label: my invoice is wrong", json.dumps({"label": "billing"})),
            chat_row("Label: where is my parcel", json.dumps({"label": "shipping"}))]
    cli.ok("registry", "datasets", "register", f"{ns}/held-out", "-f", str(write_jsonl(tmp_path / "h.jsonl", rows)))
    pairs = write_jsonl(tmp_path / "p.jsonl", [pair_row()])
    cli.ok("registry", "datasets", "register", f"{ns}/pairs", "-f", str(pairs), "--format", "preference-jsonl-v1")
    return ns


def test_set_shown_set_again_and_cleared(server, project, capsys):
    cli = Cli(capsys, server.url)
    assert cli.json("training", "projects", "get", project)["standingEvaluation"] is None
    assert "set-evaluation" in cli.ok("training", "projects", "get", project).out

    held = cli.json("training", "projects", "set-evaluation", project, "--dataset", f"{project}/held-out")
    standing = held["standingEvaluation"]
    assert held["changed"] is True and held["name"] == project
    assert (standing["dataset"], standing["grader"], standing["graderInstructions"]) == (
        f"{project}/held-out", "json-label-match", None)  # kept as given; the default grader
    assert standing["setAt"].endswith("Z") or "+00:00" in standing["setAt"]

    shown = httpx.get(f"{server.url}/v1/training/projects/{project}", headers=headers_for(server.url)).json()
    assert shown["standingEvaluation"] == standing
    listed = cli.json("training", "projects", "list")["projects"]
    assert next(p for p in listed if p["name"] == project)["standingEvaluation"] == standing
    text = cli.ok("training", "projects", "get", project).out
    assert f"every new model version on {project}/held-out with json-label-match" in text

    again = put(server.url, project, {"dataset": f"{project}/held-out"})
    assert again.status_code == 200 and again.json()["changed"] is False
    assert again.json()["standingEvaluation"]["setAt"] == standing["setAt"]  # the versions it counts from stay

    changed = put(server.url, project, {"dataset": f"{project}/held-out:v1", "grader": "exact"}).json()
    assert changed["changed"] is True
    assert (changed["standingEvaluation"]["dataset"], changed["standingEvaluation"]["grader"]) == (
        f"{project}/held-out:v1", "exact")
    text = cli.ok("training", "projects", "set-evaluation", project, "--dataset", "held-out", "--grader",
                  "contains").out
    assert f"Project {project} now evaluates every model version it registers on held-out with contains" in text

    cleared = httpx.delete(f"{server.url}/v1/training/projects/{project}/evaluation", headers=headers_for(server.url))
    assert cleared.status_code == 200 and cleared.json()["changed"] is True
    assert cleared.json()["standingEvaluation"] is None
    again = cli.json("training", "projects", "set-evaluation", project, "--clear")
    assert again["changed"] is False and again["standingEvaluation"] is None
    assert cli.json("training", "projects", "get", project)["standingEvaluation"] is None


def test_refusals_name_the_field_and_keep_nothing(server, project, capsys):
    cli = Cli(capsys, server.url)
    url = server.url

    body = problem(put(url, project, {"dataset": f"{project}/missing"}), 404)
    assert f"{project}/missing" in body["detail"] and "dataset" in body["detail"]

    body = problem(put(url, project, {"dataset": f"{project}/pairs"}), 400)
    assert body["detail"].startswith(f"dataset {project}/pairs:v1 holds") and "chat dataset" in body["hint"]

    body = problem(put(url, project, {"dataset": f"{project}/held-out", "grader": "fancy"}), 422)
    assert body["detail"].startswith("grader 'fancy' is not one of")

    body = problem(put(url, project, {"dataset": f"{project}/held-out", "grader": f"bundle:{project}/nope#score"}),
                   404)
    assert "needs a scoring bundle the registry does not hold" in body["detail"]

    body = problem(put(url, project, {"dataset": f"{project}/held-out", "grader": f"model:{project}/judge"}), 404)
    assert body["detail"].startswith(f"grader 'model:{project}/judge': the judge model")

    body = problem(put(url, project, {"dataset": f"{project}/held-out", "graderInstructions": "be strict"}), 422)
    assert "graderInstructions are for a judge model's grader" in body["detail"]

    body = problem(put(url, project, {"grader": "exact"}), 422)
    assert body["detail"].startswith("a standing evaluation needs dataset")
    body = problem(put(url, project, {"dataset": 7}), 422)
    assert body["detail"].startswith("dataset must be a registered chat dataset's reference")
    body = problem(put(url, project, {"dataset": f"{project}/held-out", "grader": 3}), 422)
    assert body["detail"].startswith("grader must be")
    body = problem(put(url, project, {"dataset": f"{project}/held-out", "colour": "red"}), 422)
    assert "colour" in body["detail"] and "dataset" in body["hint"]
    body = problem(put(url, project, ["dataset"]), 422)
    assert body["detail"].startswith("a standing evaluation needs dataset")
    problem(put(url, f"{project}x", {"dataset": f"{project}/held-out"}), 404)

    assert cli.json("training", "projects", "get", project)["standingEvaluation"] is None  # nothing was kept

    cli.ok("training", "projects", "archive", project)
    body = problem(put(url, project, {"dataset": f"{project}/held-out"}), 400)
    assert "is archived" in body["detail"] and body["hint"] == f"akka training projects unarchive {project}"
    refused = cli("training", "projects", "set-evaluation", project, "--dataset", f"{project}/held-out")
    assert refused.code == 1 and "is archived" in refused.err

    usage = cli("training", "projects", "set-evaluation", project)
    assert usage.code == 2 and "--dataset" in usage.err
    usage = cli("training", "projects", "set-evaluation", project, "--clear", "--dataset", "x/y")
    assert usage.code == 2 and "--clear" in usage.err
