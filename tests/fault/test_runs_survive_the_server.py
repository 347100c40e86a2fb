"""Runs survive the server: a server stopped (SIGTERM) or killed (kill -9) mid-run and started again on another
port leaves the run's worker training through the outage (its metrics buffered, its saves retried); the new server
reattaches it and the run completes as attempt 1 with every metric and the weights of the uninterrupted run. When
the worker dies with the server, the next server queues the run again from its newest save holding training
state, and it completes with the same weights — a pipeline's train stage too (a pipeline that curates, distils,
trains on both mixed, evaluates and gates), the pipeline then going on to its next stage."""

from __future__ import annotations

import time

import httpx
import psutil
import pytest

from optimize.curation.verdicts import asked
from optimize.sessions.candidates import parse
from optimize.sessions.oasst1 import Oasst1Parser
from tests.conftest import start_server, write_jsonl
from tests.run_fixtures import capitals_project, plan
from tests.session_files import jsonl, oasst_slice

pytestmark = [pytest.mark.fault, pytest.mark.integration]


def seeded(project: str) -> dict:
    document = plan(project, "chat")
    document["config"]["seed"] = 11
    document["config"]["hyperparams"]["training"]["maxSteps"] = 40
    document["execution"] |= {"saveEvery": 5, "resumableSaveEvery": 1}
    return document


def wait(client: httpx.Client, run_id: str, test, timeout: float = 240) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = client.get(f"/v1/training/runs/{run_id}").json()
        if test(run):
            return run
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} did not get there: {run['phase']} {run.get('failureReason')}")


def losses(client: httpx.Client, run_id: str) -> dict[int, float]:
    return {m["step"]: m["loss"] for m in client.get(f"/v1/training/runs/{run_id}/metrics").json()["steps"]}


def run_worker(run_id: str) -> psutil.Process:
    [found] = [p for p in psutil.process_iter(["cmdline"]) if run_id in (p.info.get("cmdline") or [])]
    return found


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """A server of its own (these tests stop it), a project, and the run uninterrupted as the reference."""
    data_dir = tmp_path_factory.mktemp("restarts") / "server"
    holder = {"proc": start_server(data_dir)}
    project = capitals_project(holder["proc"].url, data_dir.parent, "r", copies=3)
    client = project["client"]
    baseline = client.post("/v1/training/runs", json=seeded(project["name"])).json()
    baseline = wait(client, baseline["runId"], lambda r: r["terminal"])
    assert baseline["phase"] == "COMPLETED", baseline["failureReason"]
    holder.update(project=project, data_dir=data_dir, baseline=baseline,
                  losses=losses(client, baseline["runId"]))
    yield holder
    holder["proc"].stop()


def restart(deployment, how: str) -> httpx.Client:
    old = deployment["proc"]
    old.stop() if how == "sigterm" else old.kill9()
    time.sleep(2)  # an outage: the worker trains on, keeping what it cannot send
    deployment["proc"] = start_server(deployment["data_dir"])
    assert deployment["proc"].url != old.url or how == "sigterm"
    return httpx.Client(base_url=deployment["proc"].url, headers=deployment["proc"].headers, timeout=600)


@pytest.mark.parametrize("how", ["sigterm", "kill9"])
def test_a_run_trains_through_a_server_restart_and_completes_as_if_uninterrupted(deployment, how):
    client = httpx.Client(base_url=deployment["proc"].url, headers=deployment["proc"].headers, timeout=600)
    run = client.post("/v1/training/runs", json=seeded(deployment["project"]["name"])).json()
    # as soon as it trains: on an idle machine the stand-in's 40 updates take three seconds, and its first progress
    # report may come after the last of them
    wait(client, run["runId"], lambda r: r["phase"] == "TRAINING", timeout=60)
    worker = run_worker(run["runId"])
    client = restart(deployment, how)
    assert worker.is_running()  # the server's end is not its worker's
    done = wait(client, run["runId"], lambda r: r["terminal"])
    assert done["phase"] == "COMPLETED", done["failureReason"]
    assert done["attempt"] == 1 and done["resumed"] is None  # reattached, never tried again
    assert done["results"]["weightsDigest"] == deployment["baseline"]["results"]["weightsDigest"]
    assert losses(client, run["runId"]) == deployment["losses"]  # every metric, none lost in the outage
    snapshots = client.get(f"/v1/training/runs/{run['runId']}/snapshots").json()["snapshots"]
    assert max(s["step"] for s in snapshots) == 40


def test_a_run_whose_worker_died_with_the_server_is_queued_again_and_completes(deployment):
    client = httpx.Client(base_url=deployment["proc"].url, headers=deployment["proc"].headers, timeout=600)
    run = client.post("/v1/training/runs", json=seeded(deployment["project"]["name"])).json()
    wait(client, run["runId"], lambda r: (r["progress"].get("savedStep") or 0) >= 10)
    worker = run_worker(run["runId"])
    deployment["proc"].kill9()
    worker.kill()  # both die
    worker.wait(10)
    deployment["proc"] = start_server(deployment["data_dir"])
    client = httpx.Client(base_url=deployment["proc"].url, headers=deployment["proc"].headers, timeout=600)
    requeued = wait(client, run["runId"], lambda r: r["attempt"] == 2)
    assert requeued["resumed"]["afterLoss"] == "worker lost: it ended with the previous server process"
    assert requeued["resumed"]["optimizerState"] is True and requeued["resumed"]["step"] >= 10
    done = wait(client, run["runId"], lambda r: r["terminal"])
    assert done["phase"] == "COMPLETED", done["failureReason"]
    assert done["attempt"] == 2
    assert done["results"]["weightsDigest"] == deployment["baseline"]["results"]["weightsDigest"]
    assert losses(client, run["runId"]) == deployment["losses"]


INSTRUCTIONS = "Keep answers that are correct and polite."
SCORE = '{"score": 0.5}'


@pytest.fixture(scope="module")
def assistant(deployment):
    """What the pipeline starts from: a session of the OASST1 slice (5 candidates), and a stand-in adapter trained
    to judge its candidates (`{"score": 0.5}`, which a threshold of 0.5 keeps) and to end its answers to them (so,
    as a teacher, its answers are accepted)."""
    client = httpx.Client(base_url=deployment["proc"].url, headers=deployment["proc"].headers, timeout=600)
    name, tmp = deployment["project"]["name"], deployment["data_dir"].parent
    trees = jsonl(oasst_slice())
    session = client.post("/v1/training/sessions", params={"source": "oasst1", "project": name}, content=trees,
                          headers={"Content-Type": "application/x-ndjson"})
    assert session.status_code in (200, 201), session.text
    candidates = parse(Oasst1Parser(), trees).candidates
    judging = [{"messages": [*asked(c.messages, INSTRUCTIONS), {"role": "assistant", "content": SCORE}]}
               for c in candidates]
    answering = [{"messages": [*c.messages[:turn], {"role": "assistant", "content": "A short answer."}]}
                 for c in candidates for turn, m in enumerate(c.messages) if m["role"] == "assistant"]
    from optimize.cli.main import main

    assert main(["registry", "datasets", "register", f"{name}/assistant", "-f",
                 str(write_jsonl(tmp / "assistant.jsonl", (judging + answering) * 6)), "--server",
                 deployment["proc"].url]) == 0
    document = plan(name, "assistant", modelName="assistant")
    document["config"]["maxSeqLength"] = 512
    document["config"]["hyperparams"] = {"optimizer": {"learningRate": 0.02},
                                         "training": {"maxSteps": 40, "batchSize": 8}}
    run = client.post("/v1/training/runs", json=document).json()
    run = wait(client, run["runId"], lambda r: r["terminal"])
    assert run["phase"] == "COMPLETED", run["failureReason"]
    return {"session": session.json()["sessionHash"], "model": run["results"]["model"]}


def pipeline(name: str, assistant: dict, gate: float) -> dict:
    """Curate the session (the adapter judging), distil the curated rows (the adapter teaching), train on both
    mixed, evaluate the model on a held-out set gated at `gate`, then evaluate it on the distilled rows."""
    run_plan = seeded(name)
    return {"kind": "pipeline", "project": name, "stages": [
        {"name": "curate", "type": "curate", "sessionHashes": [assistant["session"]], "judge": assistant["model"],
         "instructions": INSTRUCTIONS, "threshold": 0.5, "dataset": f"{name}/curated"},
        {"name": "distil", "type": "distill", "teacher": assistant["model"], "from": "@curate",
         "to": f"{name}/distilled", "maxTokens": 16, "temperature": 0},
        {"name": "train", "type": "train", "baseModel": run_plan["baseModel"], "modelName": "piped",
         "config": {**run_plan["config"], "dataset": ["@curate", "@distil"]}, "mixedDataset": f"{name}/mixed",
         "execution": run_plan["execution"]},
        {"name": "held-out", "type": "evaluate", "model": "@train", "dataset": f"{name}/chat", "grader": "contains",
         "maxNewTokens": 2, "minMeanScore": gate},
        {"name": "again", "type": "evaluate", "model": "@train", "dataset": "@distil", "grader": "contains",
         "maxNewTokens": 2}]}


def until_ended(client: httpx.Client, pipeline_id: str, timeout: float = 400) -> dict:
    deadline = time.monotonic() + timeout
    while not (piped := client.get(f"/v1/training/pipelines/{pipeline_id}").json())["terminal"]:
        assert time.monotonic() < deadline, piped
        time.sleep(0.2)
    return piped


def test_a_pipeline_killed_mid_train_resumes_its_train_stage_and_completes_with_the_uninterrupted_weights(
        deployment, assistant):
    """A pipeline curates a session, distils the curated rows, trains on both mixed, evaluates on a held-out set
    and gates on the score. Run through, it completes. Run again with server and worker killed while its train
    stage trains, the next server queues the stage's run again from its newest save and it ends with the weights of
    the uninterrupted one; its gate, set above any score the model reaches, then stops it as FAILED naming the
    stage, its score and the gate, the stage after it skipped."""
    client = httpx.Client(base_url=deployment["proc"].url, headers=deployment["proc"].headers, timeout=600)
    name = deployment["project"]["name"]
    through = client.post("/v1/training/pipelines", json=pipeline(name, assistant, 0))
    assert through.status_code == 202, through.text
    through = until_ended(client, through.json()["pipelineId"])
    assert through["phase"] == "COMPLETED", through
    curate, distil, train, held_out, again = through["stages"]
    assert [s["state"] for s in through["stages"]] == ["completed"] * 5
    assert [s["jobKind"] for s in through["stages"]] == ["curation", "distillation", "run", "evaluation",
                                                        "evaluation"]
    mixed = client.get(f"/v1/training/runs/{train['jobId']}").json()["dataset"]
    assert mixed["reference"] == f"{name}/mixed:v1"
    version = client.get(f"/v1/registry/datasets/{name}/mixed/versions/v1").json()
    assert version["lineage"]["producedBy"] == {"kind": "pipeline", "id": through["pipelineId"], "stage": "train"}
    assert [p["reference"] for p in version["lineage"]["mixedFrom"]] == [curate["output"], distil["output"]]
    assert mixed["rows"] == sum(p["rows"] for p in version["lineage"]["mixedFrom"])
    assert held_out["meanScore"] >= 0 and held_out["minMeanScore"] == 0

    started = client.post("/v1/training/pipelines", json=pipeline(name, assistant, 1.0))
    pipeline_id = started.json()["pipelineId"]
    deadline = time.monotonic() + 300
    while not (stage := client.get(f"/v1/training/pipelines/{pipeline_id}").json()["stages"][2])["jobId"]:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    run_id = stage["jobId"]
    wait(client, run_id, lambda r: (r["progress"].get("savedStep") or 0) >= 10)
    worker = run_worker(run_id)
    deployment["proc"].kill9()
    worker.kill()
    worker.wait(10)
    deployment["proc"] = start_server(deployment["data_dir"])
    client = httpx.Client(base_url=deployment["proc"].url, headers=deployment["proc"].headers, timeout=600)
    piped = until_ended(client, pipeline_id)
    assert piped["phase"] == "FAILED" and piped["failureReason"].startswith("stage held-out: mean score "), piped
    assert "is below its minMeanScore 1" in piped["failureReason"]
    assert [s["state"] for s in piped["stages"]] == ["completed"] * 4 + ["skipped"]
    assert piped["stages"][2]["jobId"] == run_id and piped["stages"][2]["attempt"] == 1
    run = client.get(f"/v1/training/runs/{run_id}").json()
    assert run["attempt"] == 2 and run["pipeline"] == {"pipelineId": pipeline_id, "stage": "train"}
    assert run["dataset"] == mixed  # the same rows mixed again: the same version
    assert run["results"]["weightsDigest"] == client.get(
        f"/v1/training/runs/{train['jobId']}").json()["results"]["weightsDigest"]
