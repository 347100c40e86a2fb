"""A server of a test module's own with one READY endpoint of a base stand-in, for the endpoint tests that need an
endpoint but no trained adapter (the cpu has one serving slot, which the endpoint holds until it is deleted)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from tests.conftest import ServerProcess, from_standin, start_server

ENDPOINTS = "/v1/training/endpoints"


@contextlib.contextmanager
def server_with_endpoint(folder: Path, model: str, project: str, env: dict[str, str] | None = None
                         ) -> Iterator[tuple[ServerProcess, httpx.Client, str]]:
    """(the server, a client as its administrator, the READY endpoint's id); the endpoint is deleted and the server
    stopped at the end. `env` is the server's (and so its workers') extra environment."""
    proc = start_server(folder, env=env)
    client = httpx.Client(base_url=proc.url, headers=proc.headers, timeout=300)
    endpoint_id = None
    try:
        client.post(f"/v1/training/base-models/{model}/select", json=from_standin(model)).raise_for_status()
        client.post("/v1/training/projects", json={"name": project}).raise_for_status()
        created = client.post(ENDPOINTS, json={"model": model, "project": project})
        assert created.status_code == 202, created.text
        endpoint_id = created.json()["endpointId"]
        deadline = time.monotonic() + 300
        while (endpoint := client.get(f"{ENDPOINTS}/{endpoint_id}").json())["phase"] != "READY":
            assert not endpoint["terminal"] and time.monotonic() < deadline, endpoint
            time.sleep(0.2)
        yield proc, client, endpoint_id
    finally:
        if endpoint_id is not None:
            client.delete(f"{ENDPOINTS}/{endpoint_id}")
        client.close()
        proc.stop()
