"""The Ray executor against a real Ray cluster the test starts on this machine (`ray.cluster_utils.Cluster`: a
head and two nodes, each a raylet of its own): the server's inventory comes from the nodes (`training capacity`
shows them), a run and an evaluation asking for the profile only one node offers are placed on that node, a run
asking for two devices no one node offers waits for one that does, and a
node removed mid-run is a lost worker — the run is queued again and completes on the other node with the weights
of the uninterrupted run; a server killed mid-run finds the run's worker on the cluster again (a detached actor
named after the job) and the run completes as its first attempt."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.conftest import Cli, catalog_with_devices, chat_row, start_server, write_jsonl
from tests.run_fixtures import capitals_project, plan
from tests.run_fixtures import wait_for as wait

pytestmark = [pytest.mark.integration, pytest.mark.fault]
ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    from optimize.jobs.ray_executor import node_resources

    made = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    # node "a" offers a cpu slot and the only `alt` slot; node "b" a cpu slot
    a = made.add_node(num_cpus=1, resources={**node_resources("cpu", 1), **node_resources("alt", 1)})
    b = made.add_node(num_cpus=1, resources=node_resources("cpu", 1))
    yield {"cluster": made, "a": a, "b": b}
    made.shutdown()


@pytest.fixture(scope="module")
def server(cluster, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ray")
    catalog = catalog_with_devices(tmp, [{"name": "cpu", "kind": "cpu", "devices": 1},
                                         {"name": "alt", "kind": "cpu", "devices": 1}])
    args = ["--catalog", str(catalog), "--executor", "ray", "--ray-address", cluster["cluster"].address]
    proc = start_server(tmp / "data", extra_args=args)
    project = capitals_project(proc.url, tmp, "ray", copies=3)
    held = {"proc": proc, "project": project, "client": project["client"], "args": args, "data": tmp / "data"}
    yield held
    held["proc"].stop()


@pytest.fixture(scope="module")
def baseline(server) -> dict:
    """The seeded run uninterrupted: what an interrupted one on the cpu profile must end with. It trains on the `alt`
    profile, which only node "a" offers, so that the placement test reads the same run (each run on Ray starts a
    worker from scratch, seconds of imports); both profiles are cpu slots of the same arithmetic, so its weights are
    those of the seeded run on either."""
    client = server["client"]
    run = client.post("/v1/training/runs", json=seeded(server["project"]["name"], "alt")).json()
    done = wait(client, f"/v1/training/runs/{run['runId']}", lambda r: r["terminal"])
    assert done["phase"] == "COMPLETED", done["failureReason"]
    return done


def seeded(project: str, profile: str) -> dict:
    document = plan(project, "chat")
    document["config"]["seed"] = 11
    document["config"]["hyperparams"]["training"]["maxSteps"] = 30
    document["execution"] |= {"deviceProfile": profile, "saveEvery": 5, "resumableSaveEvery": 1}
    return document


def node_of(client: httpx.Client, path: str, attempt: int) -> str:
    """The Ray node the attempt's worker ran on, from the first line of its log."""
    text = client.get(f"{path}/logs", params={"attempt": attempt}).json()["text"]
    return re.search(r"on Ray node (\w+)", text).group(1)


def test_capacity_shows_the_cluster_s_nodes_and_what_they_offer(server, cluster, capsys):
    shown = Cli(capsys, server["proc"].url).json("training", "capacity")
    assert shown["executor"] == "ray"
    offered = {n["node"]: n["profiles"] for n in shown["nodes"] if n["alive"]}
    assert offered == {cluster["a"].node_id: {"cpu": 1, "alt": 1}, cluster["b"].node_id: {"cpu": 1}}
    pools = {(p["pool"], p["profile"]): p for p in shown["pools"]}
    assert pools[("training", "cpu")]["online"] == 2 and pools[("training", "alt")]["online"] == 1
    text = Cli(capsys, server["proc"].url).ok("training", "capacity").out
    assert "Nodes" in text and cluster["a"].node_id[:12] in text


def test_a_run_on_two_devices_waits_for_one_node_that_offers_both(server):
    """The cluster offers two cpu slots, one on each node: a run asking for both is not granted (its worker's
    resources all come from one node, so Ray would hold it unplaced until its lease lapsed) and says why."""
    client = server["client"]
    document = seeded(server["project"]["name"], "cpu")
    document["execution"]["gpus"] = 2
    run = client.post("/v1/training/runs", json=document).json()
    assert "runId" in run, run
    path = f"/v1/training/runs/{run['runId']}"
    waiting = wait(client, path, lambda r: "one live node offers is 1" in (r.get("waitingFor") or ""))
    assert waiting["waitingFor"] == ("waiting for a node that offers 2 cpu devices (a job's devices are all on one "
                                     "node): the most one live node offers is 1")
    assert waiting["phase"] == "QUEUED" and waiting["execution"]["devicesHeld"] == []
    client.post(f"{path}/cancel").raise_for_status()
    assert wait(client, path, lambda r: r["terminal"])["phase"] == "CANCELLED"


def test_a_run_and_an_evaluation_are_placed_on_the_node_that_has_their_profile(server, cluster, baseline, tmp_path):
    client, name = server["client"], server["project"]["name"]
    done = baseline  # the seeded run on the alt profile
    assert done["execution"]["deviceProfile"] == "alt"
    assert node_of(client, f"/v1/training/runs/{done['runId']}", 1) == cluster["a"].node_id

    from optimize.cli.main import main

    rows = [chat_row(f"Capital of {c}?", c) for c in ("France", "Peru")]
    asked = write_jsonl(tmp_path / "a.jsonl", rows)
    assert main(["registry", "datasets", "register", f"{name}/asked", "-f", str(asked), "--server",
                 server["proc"].url]) == 0
    evaluation = client.post("/v1/training/evaluations", json={
        "model": done["results"]["model"], "dataset": f"{name}/asked", "deviceProfile": "alt",
        "maxNewTokens": 8}).json()
    path = f"/v1/training/evaluations/{evaluation['evaluationId']}"
    finished = wait(client, path, lambda e: e["terminal"])
    assert finished["phase"] == "COMPLETED", finished.get("failureReason")
    assert node_of(client, path, 1) == cluster["a"].node_id


def test_a_server_killed_mid_run_finds_its_worker_on_the_cluster_again(server, baseline):
    client, name = server["client"], server["project"]["name"]
    run = client.post("/v1/training/runs", json=seeded(name, "cpu")).json()
    path = f"/v1/training/runs/{run['runId']}"
    wait(client, path, lambda r: (r["progress"].get("observedStep") or 0) >= 3)
    server["proc"].kill9()
    server["proc"] = start_server(server["data"], extra_args=server["args"])
    client = server["client"] = httpx.Client(base_url=server["proc"].url, headers=server["proc"].headers,
                                             timeout=600)
    done = wait(client, path, lambda r: r["terminal"])
    assert done["phase"] == "COMPLETED", done["failureReason"]
    assert done["attempt"] == 1 and done["resumed"] is None  # reattached, never tried again
    assert done["results"]["weightsDigest"] == baseline["results"]["weightsDigest"]


def test_a_node_lost_mid_run_requeues_the_run_on_another_node_with_the_same_weights(server, cluster, baseline):
    client, name = server["client"], server["project"]["name"]
    run = client.post("/v1/training/runs", json=seeded(name, "cpu")).json()
    path = f"/v1/training/runs/{run['runId']}"
    wait(client, path, lambda r: (r["progress"].get("savedStep") or 0) >= 10)
    first = node_of(client, path, 1)
    lost = cluster["a"] if first == cluster["a"].node_id else cluster["b"]
    cluster["cluster"].remove_node(lost, allow_graceful=False)  # the node and its worker are gone
    requeued = wait(client, path, lambda r: r["attempt"] == 2)
    assert requeued["resumed"]["afterLoss"].startswith("worker lost: its Ray actor died")
    done = wait(client, path, lambda r: r["terminal"])
    assert done["phase"] == "COMPLETED" and done["attempt"] == 2, done["failureReason"]
    assert node_of(client, path, 2) != first
    assert done["results"]["weightsDigest"] == baseline["results"]["weightsDigest"]
