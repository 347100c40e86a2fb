"""`GET /v1/health` polled by a process of its own while a test works the server hard: how long each answer took.

A process, not a thread of the test's: the test's own work (the CLI runs in its process) holds that process's
interpreter lock at times, and a thread beside it would count those waits as the server's answer time.
"""

from __future__ import annotations

import json
import subprocess
import sys

POLLER = """
import json, select, sys, time
import httpx

took, failed = [], []
with httpx.Client(base_url=sys.argv[1], timeout=10) as client:
    while True:
        started = time.monotonic()
        try:
            status = client.get("/v1/health").status_code
        except httpx.HTTPError as error:
            status = repr(error)
        took.append(time.monotonic() - started)
        if status != 200:
            failed.append(status)
        if len(took) == 1:
            print("watching", flush=True)  # the first answer came: the watch is under way
        if select.select([sys.stdin], [], [], float(sys.argv[2]))[0]:  # the test closed our stdin: stop
            break
print(json.dumps({"took": took, "failed": failed[:3]}))
"""


class HealthWatch:
    """Polls from construction (every `every` seconds) until `stop()` or the end of a `with` block; then `took`
    holds each answer's seconds and `failed` the first answers that were not 200."""

    def __init__(self, url: str, every: float = 0.1) -> None:
        self.took: list[float] = []
        self.failed: list[object] = []
        self._process = subprocess.Popen([sys.executable, "-c", POLLER, url, str(every)], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True)
        # the watch covers what the test does next only once it has its first answer (the poller takes a moment
        # to start, which a quick test would otherwise finish in)
        self._process.stdout.readline()

    def stop(self) -> None:
        if self._process.returncode is not None:
            return
        out, _ = self._process.communicate("", timeout=30)
        if out.strip():
            found = json.loads(out)
            self.took, self.failed = found["took"], found["failed"]

    def __enter__(self) -> HealthWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
