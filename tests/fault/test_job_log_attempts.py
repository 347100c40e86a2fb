"""A run whose worker is killed is tried again, and each attempt keeps a log of its own: `runs logs --attempt N`
reads either, the newest by default; `--follow` ends once the run is settled (and on Ctrl-C, saying it goes on)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import httpx
import pytest

from tests.conftest import Cli, as_a_terminal_starts_it
from tests.fault import test_run_faults as faults

pytestmark = [pytest.mark.fault, pytest.mark.integration]
short_lease_server = faults.short_lease_server  # a server with short leases and a dataset to train on
lease_server = faults.lease_server


def logged(client: httpx.Client, run_id: str, attempt: int, words: str, timeout: float = 120) -> dict:
    """The attempt's log once it holds `words`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answer = client.get(f"/v1/training/runs/{run_id}/logs", params={"attempt": attempt})
        if answer.status_code == 200 and words in answer.json()["text"]:
            return answer.json()
        time.sleep(0.3)
    raise AssertionError(f"attempt {attempt} of run {run_id} logged no {words!r}: {answer.text[-2000:]}")


def follow(url: str, run_id: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "optimize", "training", "runs", "logs", run_id, "--follow",
                             "--server", url], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=as_a_terminal_starts_it)


def ended(process: subprocess.Popen) -> tuple[str, str]:
    """What it printed (as written: a progress bar's carriage returns stay)."""
    out, err = process.communicate(timeout=30)
    return out.decode(), err.decode()


def test_each_attempt_keeps_its_own_log_and_follow_ends_with_the_run(lease_server, capsys):
    proc, client = lease_server
    run_id = client.post("/v1/training/runs", json=faults.long_plan(attempts=2)).json()["runId"]
    faults.wait_for(client, run_id, {"TRAINING"})
    first = logged(client, run_id, 1, "{'loss': ")
    [worker] = faults.workers(run_id)
    worker.kill()  # attempt 2 starts from scratch
    logged(client, run_id, 2, "{'loss': ")
    cli = Cli(capsys, proc.url)
    one = cli.ok("training", "runs", "logs", run_id, "--attempt", "1").out
    two = cli.ok("training", "runs", "logs", run_id, "--attempt", "2").out
    assert one.startswith(first["text"]) and "{'loss': " in two and not two.startswith(one)
    newest = cli("training", "runs", "logs", run_id[:8])
    assert newest.out.startswith(two) and "Attempt 2 of run" in newest.err and "attempts with logs: 1, 2" in newest.err
    assert cli.ok("training", "runs", "logs", run_id, "--attempt", "1", "--follow").out == one  # over: at once
    # Ctrl-C stops following; the run goes on
    interrupted = follow(proc.url, run_id)
    out = interrupted.stdout.readline()  # it follows: the log is coming
    interrupted.send_signal(signal.SIGINT)
    out, err = (out + interrupted.stdout.read()).decode(), interrupted.stderr.read().decode()
    assert interrupted.wait(30) == 130 and "{'loss': " in out
    assert f"Stopped following the log of run {run_id[:12]}; the run goes on" in err
    assert client.get(f"/v1/training/runs/{run_id}").json()["phase"] == "TRAINING"
    # following to the end: it returns once the run is settled and its log drained
    followed = follow(proc.url, run_id)
    time.sleep(2)
    assert followed.poll() is None  # still following the training attempt
    client.post(f"/v1/training/runs/{run_id}/cancel").raise_for_status()
    out, err = ended(followed)
    assert followed.returncode == 0, err
    assert out == cli.ok("training", "runs", "logs", run_id).out and out.startswith(two)
