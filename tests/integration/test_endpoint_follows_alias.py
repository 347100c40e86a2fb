"""An endpoint serving a model by its alias (`NS/NAME:champion`) follows the alias: on a server of this module's own
(the cpu's one serving slot), a short run registers its model (v1) and a save registers as v2 (`registry models
register --snapshot`, refused into another project's namespace); champion on v1 is
served and answers; moved to v2, the endpoint attaches v2 beside v1, requests for the alias go to v2 once it is
loaded, v1 is detached, and the endpoint says what it follows — without a restart."""

from __future__ import annotations

import time

import pytest

from tests.conftest import Cli, start_server
from tests.endpoint_fixtures import ENDPOINTS
from tests.run_fixtures import capitals_project, plan, wait_for

pytestmark = pytest.mark.integration
HI = [{"role": "user", "content": "What is the capital of France?"}]


def _models(client, endpoint_id: str) -> dict[str, dict]:
    return {m["name"]: m for m in client.get(f"{ENDPOINTS}/{endpoint_id}").json()["models"] if m["kind"] == "adapter"}


def _until(test, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while not (found := test()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)
    return found


def test_an_endpoint_serving_an_alias_answers_from_the_version_it_moves_to(tmp_path, capsys):
    proc = start_server(tmp_path / "server")
    try:
        project = capitals_project(proc.url, tmp_path, "follow")
        client, name = project["client"], project["name"]
        document = plan(name, "chat", modelName="capitals")
        document["config"]["hyperparams"]["training"]["maxSteps"] = 4
        document["execution"]["saveEvery"] = 2
        run_id = client.post("/v1/training/runs", json=document).json()["runId"]
        wait_for(client, f"/v1/training/runs/{run_id}", lambda r: r["phase"] == "COMPLETED",
                 fail_if=lambda r: r["terminal"] and r["phase"] != "COMPLETED")
        model = f"{name}/capitals"
        early = next(s for s in client.get(f"/v1/training/runs/{run_id}/snapshots").json()["snapshots"]
                     if s["step"] == 2)
        cli = Cli(capsys, proc.url)
        registered = cli.json("registry", "models", "register", model, "--snapshot", early["snapshotId"][:12],
                              "--alias", "candidate")  # the save at step 2, as a version of its own
        assert (registered["reference"], registered["aliases"]) == (f"{model}:v2", ["latest", "candidate"])
        elsewhere = cli("registry", "models", "register", "other/capitals", "--snapshot", early["snapshotId"])
        assert elsewhere.code == 1 and f"its weights register under {name}/NAME, not other/capitals" in elsewhere.err
        cli.ok("registry", "models", "alias", "set", f"{model}:champion", "--version", "v1")
        endpoint_id = cli.json("training", "endpoints", "create", "--model", f"{model}:champion")["endpointId"]
        wait_for(client, f"{ENDPOINTS}/{endpoint_id}", lambda e: e["settled"], fail_if=lambda e: e["terminal"])
        assert _models(client, endpoint_id)[f"{model}:v1"]["follows"] == "champion"
        asked = {"model": f"{model}:champion", "messages": HI, "max_tokens": 4, "temperature": 0}
        first = client.post("/v1/chat/completions", json=asked)
        assert first.status_code == 200 and first.json()["model"] == f"{model}:v1", first.text

        cli.ok("registry", "models", "alias", "set", f"{model}:champion", "--version", "v2")
        _until(lambda: set(_models(client, endpoint_id)) == {f"{model}:v2"}
               and _models(client, endpoint_id)[f"{model}:v2"]["ready"])
        moved = _models(client, endpoint_id)[f"{model}:v2"]
        assert moved["follows"] == "champion" and moved["replacedBy"] is None
        after = client.post("/v1/chat/completions", json=asked)
        assert after.status_code == 200 and after.json()["model"] == f"{model}:v2", after.text
        shown = cli.ok("training", "endpoints", "get", endpoint_id[:12]).out
        assert f"{model}:v2" in shown and "(follows champion)" in shown
        assert [m["id"] for m in client.get("/v1/models").json()["data"]] == [
            "optimize/tiny-llama-3.2", f"{model}:v2"]
        client.delete(f"{ENDPOINTS}/{endpoint_id}")
    finally:
        proc.stop()
