"""A run's notes through the CLI and the API: `runs annotate` sets and clears its description and config name (its
column in the scores tables), `runs get` and `runs list` show them, and a plan's configName is recorded at
admission. On the session's completed run (its notes cleared again afterwards, as it came) and, for admission, a
run of a project of its own cancelled as soon as it is queued."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import Cli
from tests.run_fixtures import capitals_project, plan

pytestmark = pytest.mark.integration


@pytest.fixture
def annotated(sqlite_server, completed_run, capsys):
    """The completed run's id and a CLI on its server; its notes are cleared again after the test."""
    cli = Cli(capsys, sqlite_server.url)
    run_id = completed_run["run"]["runId"]
    yield cli, run_id
    cli.ok("training", "runs", "annotate", run_id, "--description", "", "--config-name", "")


def test_annotate_sets_and_clears_a_runs_description_and_config_name(annotated):
    cli, run_id = annotated
    short = run_id[:12]
    done = cli.ok("training", "runs", "annotate", short, "--description", "lr 0.01, 16 updates", "--config-name",
                  "capitals-lr01")
    assert done.out.strip() == (f"Run {short}: description set to 'lr 0.01, 16 updates'; config name set to "
                                "'capitals-lr01'.")
    run = cli.json("training", "runs", "get", short)
    assert run["description"] == "lr 0.01, 16 updates" and run["configName"] == "capitals-lr01"
    keys = list(run)
    assert keys.index("configName") == keys.index("description") + 1  # right after the description
    text = cli.ok("training", "runs", "get", short).out
    assert "Config name  capitals-lr01" in text and "Description  lr 0.01, 16 updates" in text
    listed = cli.ok("training", "runs", "list", "--project", run["project"]).out
    assert "NOTES" in listed and "capitals-lr01: lr 0.01, 16 updates" in listed

    # one field at a time: the other stays as it is; an empty TEXT clears
    assert cli.ok("training", "runs", "annotate", short, "--config-name", "").out.strip() == (
        f"Run {short}: config name cleared.")
    run = cli.json("training", "runs", "get", short)
    assert run["configName"] is None and run["description"] == "lr 0.01, 16 updates"
    answer = cli.json("training", "runs", "annotate", short, "--description", "")
    assert answer["runId"] == run_id and answer["description"] is None and answer["configName"] is None
    listed = cli.ok("training", "runs", "list", "--project", run["project"]).out
    assert "lr 0.01" not in listed


def test_annotate_refuses_no_flag_and_an_unknown_run(annotated):
    cli, run_id = annotated
    neither = cli("training", "runs", "annotate", run_id)
    assert neither.code == 2 and "give --description, --config-name or both" in neither.err
    unknown = cli("training", "runs", "annotate", "deadbeef0000", "--description", "x")
    assert unknown.code == 1 and "run 'deadbeef0000' does not exist" in unknown.err
    assert cli.json("training", "runs", "get", run_id)["description"] is None  # nothing was set


def test_the_patch_route_refuses_bad_bodies_in_their_own_words(annotated, sqlite_server):
    cli, run_id = annotated
    client = httpx.Client(base_url=sqlite_server.url, headers=cli.headers, timeout=60)
    path = f"/v1/training/runs/{run_id}"
    for body in ({}, {"description": None}):
        refused = client.patch(path, json=body)
        assert refused.status_code == 400, refused.text
        assert refused.json()["detail"] == "the annotation names no field: give description, configName or both"
    too_long = client.patch(path, json={"configName": "x" * 65})
    assert too_long.status_code == 422 and "configName must be a string of at most 64 characters" in (
        too_long.json()["detail"])
    not_text = client.patch(path, json={"description": 3})
    assert not_text.status_code == 422 and "description must be a string" in not_text.json()["detail"]
    not_an_object = client.patch(path, json=["description"])
    assert not_an_object.status_code == 422 and not_an_object.json()["detail"] == (
        "the request body must be one JSON object: {description?, configName?}")
    unknown_field = client.patch(path, json={"notes": "x"})
    assert unknown_field.status_code == 422 and "unknown field(s) notes" in unknown_field.json()["detail"]
    missing = client.patch("/v1/training/runs/deadbeef0000", json={"description": "x"})
    assert missing.status_code == 404 and missing.json()["detail"] == "run 'deadbeef0000' does not exist"
    done = client.patch(path, json={"configName": "by-the-api"})
    assert done.status_code == 200 and done.json()["configName"] == "by-the-api"


def test_a_plans_config_name_is_recorded_at_admission(sqlite_server, tmp_path):
    project = capitals_project(sqlite_server.url, tmp_path, "an")
    client = project["client"]
    document = plan(project["name"], "chat", description="first try", configName="capitals first try")
    queued = client.post("/v1/training/runs", json=document)
    assert queued.status_code == 202, queued.text
    run_id = queued.json()["runId"]
    try:
        assert queued.json()["configName"] == "capitals first try"
        assert queued.json()["description"] == "first try"
    finally:
        client.post(f"/v1/training/runs/{run_id}/cancel").raise_for_status()
    too_long = client.post("/v1/training/runs", json={**document, "configName": "x" * 65})
    assert too_long.status_code == 422 and "configName" in too_long.json()["detail"]
