"""The server a benchmark starts for itself: `akka server start` on a free port in a data dir of its own, waited for
until `/v1/health` answers, and stopped (its workers with it) when the benchmark is done."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

AKKA = [sys.executable, "-m", "optimize"]


def start_server(data_dir: Path, args: tuple[str, ...] = (), env: dict[str, str] | None = None,
                 seconds: float = 90) -> tuple[subprocess.Popen, str]:
    """(the server process, its URL); its output goes to `server.log` beside the data dir."""
    data_dir.mkdir(parents=True, exist_ok=True)
    log = data_dir.parent / "server.log"
    with log.open("ab") as sink:
        server = subprocess.Popen([*AKKA, "server", "start", "--port", "0", "--data-dir", str(data_dir), *args],
                                  stdout=sink, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit(f"the server exited with {server.returncode}: {log.read_text()[-3000:]}")
        if (data_dir / "server.json").exists():
            try:
                url = json.loads((data_dir / "server.json").read_text())["url"]
                with urllib.request.urlopen(f"{url}/v1/health", timeout=2):
                    return server, url
            except (ValueError, KeyError, OSError):
                pass
        time.sleep(0.1)
    stop_server(server)
    sys.exit(f"the server did not start within {seconds:g} s; see {log}")


def stop_server(server: subprocess.Popen) -> None:
    """The server this benchmark started (its run and endpoint workers stop with it)."""
    if server.poll() is not None:
        return
    server.send_signal(signal.SIGTERM)
    try:
        server.wait(30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
