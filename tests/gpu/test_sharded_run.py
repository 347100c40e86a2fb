"""A supervised run on two GPUs with its model sharded (`execution.sharding: fsdp`, FSDP2 over NCCL), through a real
server whose GPU profile has two devices: it completes, its log names the FSDP units, and paused with a save and
resumed it completes from its sharded training state (skipped without two NVIDIA GPUs; the cpu/gloo version of these
flows is `tests/integration/test_runs_on_two_devices.py`)."""

from __future__ import annotations

import re

import pytest

from tests.conftest import catalog_with_devices, start_server
from tests.run_fixtures import capitals_project, plan, wait_for

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                                 reason="needs two NVIDIA GPUs")]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sharded-gpus")
    memory = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    catalog = catalog_with_devices(tmp, [{"name": "cpu", "kind": "cpu", "devices": 1},
                                         {"name": "gpu", "kind": "gpu", "devices": 2, "memoryGiB": memory}])
    proc = start_server(tmp / "data", extra_args=["--catalog", str(catalog)])
    yield capitals_project(proc.url, tmp, "fsdp", copies=4)
    proc.stop()


def test_a_sharded_run_on_two_gpus_completes_and_resumes_from_its_sharded_state(deployment):
    client = deployment["client"]
    document = plan(deployment["name"], "chat")
    document["config"]["hyperparams"]["training"] = {"maxSteps": 12, "batchSize": 2}
    document["execution"] = {"deviceProfile": "gpu", "gpus": 2, "sharding": "fsdp", "saveEvery": 4,
                             "resumableSaveEvery": 1}
    run = client.post("/v1/training/runs", json=document).json()
    assert "runId" in run, run
    wait_for(client, f"/v1/training/runs/{run['runId']}", lambda r: (r["progress"].get("savedStep") or 0) >= 4)
    client.post(f"/v1/training/runs/{run['runId']}/pause", json={"checkpoint": "save"}).raise_for_status()
    wait_for(client, f"/v1/training/runs/{run['runId']}", lambda r: r["phase"] == "PAUSED")
    client.post(f"/v1/training/runs/{run['runId']}/resume").raise_for_status()
    done = wait_for(client, f"/v1/training/runs/{run['runId']}", lambda r: r["terminal"])
    assert done["phase"] == "COMPLETED" and done["attempt"] == 2, done["failureReason"]
    assert done["execution"]["sharding"] == "fsdp" and done["checks"]["status"] == "passed"
    logs = client.get(f"/v1/training/runs/{run['runId']}/logs", params={"attempt": 2}).json()["text"]
    units = re.search(r"sharding: fsdp, (\d+) FSDP units over 2 devices", logs)
    assert units and int(units.group(1)) >= 3, logs[-2000:]
    assert done["memory"]["measuredGiB"] is not None
