"""User code off the request path, against a real server: 40 bundle checks at once, each scoring a row with a
function that sleeps, while `/v1/health`, a worker's route and another token's ordinary request are asked
throughout, each from a thread of its own. Health answers within a second throughout, the others well before a
check's sleep ends; the checks past the token's limit are refused 429 at once, naming the limit and the setting that
raises it; the checks within it, and another token's, are scored. A malformed limit stops the server at its start."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.conftest import Cli, write_jsonl
from tests.health_watch import HealthWatch

pytestmark = pytest.mark.integration

SLEEP_S = 4  # longer than any answer below may take: a route queued behind a check would show it
CHECKS = 40
PER_TOKEN = 4

SLEEPING = f'''import time

FIELDS = ["answer"]


def compute_score(prompt_messages, completion_text, fields):
    time.sleep({SLEEP_S})
    return 1.0 if completion_text.strip() == fields["answer"] else 0.0
'''


def test_forty_slow_checks_leave_health_and_other_requests_answering(server_factory, capsys, tmp_path):
    server = server_factory("pool", env={"OPTIMIZE_USER_CODE_WORKERS": "4",
                                         "OPTIMIZE_USER_CODE_PER_TOKEN": str(PER_TOKEN)})
    cli = Cli(capsys, server.url)
    bundle = tmp_path / "slow"
    bundle.mkdir()
    (bundle / "reward.py").write_text(SLEEPING)
    cli.ok("registry", "bundles", "register", "pool/slow", "-f", str(bundle))
    rows = [{"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}], "answer": "4"}]
    cli.ok("registry", "datasets", "register", "pool/qa", "-f", str(write_jsonl(tmp_path / "qa.jsonl", rows)))
    other = {"Authorization": f"Bearer {cli.json('auth', 'tokens', 'create', 'other', '--role', 'trainer')['token']}"}
    check_url = f"{server.url}/v1/registry/bundles/pool/slow/check"
    body = {"dataset": "pool/qa", "samples": 1}

    slowest: dict[str, float] = {"worker route": 0.0, "another token's list": 0.0}
    failures: list[str] = []
    done = threading.Event()
    ready = threading.Semaphore(0)
    trace = []
    t0 = time.monotonic()

    def poll(name: str, method: str, path: str, headers: dict[str, str], status: int | None) -> None:
        with httpx.Client(timeout=30) as client:
            ask = lambda: client.request(method, f"{server.url}{path}", headers=headers,  # noqa: E731
                                         json={} if method == "POST" else None)
            ask()  # the route's first answer (its modules imported, a connection opened) is not what is measured
            ready.release()
            while not done.is_set():
                start = time.monotonic()
                answer = ask()
                took = time.monotonic() - start
                slowest[name] = max(slowest[name], took)
                trace.append((round(start - t0, 2), name, round(took, 3)))
                if answer.status_code >= 500 or (status is not None and answer.status_code != status):
                    failures.append(f"{name}: {answer.status_code} {answer.text[:200]}")
                time.sleep(0.05)

    # health is polled by a process of its own (the 41 threads of this test share its interpreter's lock); the
    # other probes are the test's threads, with a bound that leaves room for that
    probes = [# a worker's route: fenced by its lease, so a made-up lease is answered (404), and quickly
              ("worker route", "POST", "/v1/internal/jobs/run/0123456789abcdef/heartbeat", {"X-Lease-Token": "x"},
               None),
              ("another token's list", "GET", "/v1/registry/bundles", other, 200)]
    pollers = [threading.Thread(target=poll, args=probe, daemon=True) for probe in probes]
    for poller in pollers:
        poller.start()
    for _ in pollers:
        assert ready.acquire(timeout=30)
    time.sleep(0.3)  # a few answers from an idle server first

    # one client for every check, made before they start: a client each would make the test's own threads busy
    # (each loads its TLS settings) and slow its pollers, which share their process
    checks = httpx.Client(timeout=60, limits=httpx.Limits(max_connections=CHECKS + 1))

    def check(headers: dict[str, str]) -> tuple[int, dict, float]:
        start = time.monotonic()
        answer = checks.post(check_url, json=body, headers=headers)
        return answer.status_code, answer.json(), time.monotonic() - start

    started = time.monotonic()
    with HealthWatch(server.url, every=0.05) as health, checks, ThreadPoolExecutor(CHECKS + 1) as pool:
        answers = list(pool.map(check, [server.headers] * CHECKS))
        # the admin's places are full (or just freed); another token has places of its own
        theirs = pool.submit(check, other).result()
    done.set()
    for poller in pollers:
        poller.join(30)
    elapsed = time.monotonic() - started

    assert not failures and not health.failed, (failures, health.failed)
    slow = sorted(trace, key=lambda t: -t[2])[:5]  # (seconds into the test, probe, seconds it took)
    assert health.took and max(health.took) < 1.0, sorted(health.took)[-5:]
    # a worker's heartbeat and another token's request: within a second on an idle machine; the bound leaves room
    # for a busy one (the checks' processes start on the same cores), and is still well short of a check's sleep
    assert slowest["worker route"] < 2.0 and slowest["another token's list"] < 2.0, slow
    scored = [a for status, a, _ in answers if status == 200]
    refused = [(a, took) for status, a, took in answers if status == 429]
    assert len(scored) + len(refused) == CHECKS, [(s, a) for s, a, _ in answers if s not in (200, 429)]
    assert PER_TOKEN <= len(scored) < CHECKS and refused
    assert all(a["scored"] == 1 and a["mean"] == 1.0 for a in scored)
    problem, took = refused[0]
    assert problem["code"] == "too_many" and problem["limit"] == PER_TOKEN and took < SLEEP_S
    assert f"checks of user code in flight, its limit ({PER_TOKEN} per token)" in problem["detail"]
    assert "held by bundle check pool/slow" in problem["detail"]
    assert "OPTIMIZE_USER_CODE_PER_TOKEN" in problem["hint"]
    assert theirs[0] == 200 and theirs[1]["scored"] == 1, theirs
    assert elapsed < 25, elapsed


def test_a_malformed_setting_stops_the_server_at_its_start_in_one_line(tmp_path):
    started = subprocess.run([sys.executable, "-m", "optimize", "server", "start", "--port", "0", "--data-dir",
                              str(tmp_path / "data")], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "OPTIMIZE_USER_CODE_WORKERS": "four"})
    assert started.returncode == 2
    assert started.stderr.strip() == ("error: OPTIMIZE_USER_CODE_WORKERS='four' is not a whole number above 0 (set "
                                      "OPTIMIZE_USER_CODE_WORKERS to a whole number above 0, or unset it for the "
                                      "default (4))")
