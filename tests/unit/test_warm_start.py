"""Warm starts: a worker forked from the warm worker is what a started one is — its own session, the job's command
line and environment as /proc shows them (what the executor, `ps` and a restarted server read), its log — and
its exit reaches the server with its code. The run, evaluation and endpoint flows and the fault tests run every
cpu job this way; this test pins the fork itself."""

from __future__ import annotations

import os
import sys

import psutil
import pytest

from optimize.jobs import warm_start
from optimize.jobs.warm_start import WarmStarter


@pytest.fixture(scope="module")
def starter(tmp_path_factory):
    folder = tmp_path_factory.mktemp("warm")
    started = WarmStarter({"PATH": os.environ["PATH"], "HOME": str(folder)}, folder / "warm.log", reserve=400)
    yield started, folder
    started.close()


def test_a_forked_worker_carries_the_jobs_command_line_environment_and_exit_code(starter):
    started, folder = starter
    # a run worker with a lease token but no server to reach: it waits for one, showing who it is
    command = [sys.executable, "-m", "optimize.worker", "run", "0" * 32, "--server", "http://127.0.0.1:9"]
    env = {"PATH": os.environ["PATH"], "HOME": str(folder), "OPTIMIZE_LEASE_TOKEN": "t" * 32,
           "CUDA_VISIBLE_DEVICES": "", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
           "OPTIMIZE_SERVER_FILE": str(folder / "absent.json")}
    child = started.start(command, env, folder / "worker.log")
    assert child is not None, (folder / "warm.log").read_text()
    process = psutil.Process(child.pid)
    assert [part for part in process.cmdline() if part] == command
    assert process.environ() == env  # what an operator or a restarted server reads under /proc
    assert process.pid == os.getsid(process.pid) != os.getsid(started._process.pid)  # a session of its own
    assert child.poll() is None
    child.kill()
    assert child.wait(30) == -9 and child.poll() == -9  # as subprocess reports a signal: the server's loss reason
    assert (folder / "worker.log").exists()


def test_a_command_line_longer_than_the_reserve_starts_from_scratch(starter):
    started, folder = starter
    command = [sys.executable, "-m", "optimize.worker", "run", "0" * 400, "--server", "http://127.0.0.1:9"]
    assert started.start(command, {}, folder / "long.log") is None


def test_warm_starts_can_be_turned_off(monkeypatch):
    assert warm_start.enabled()
    monkeypatch.setenv("OPTIMIZE_WARM_WORKERS", "0")
    assert not warm_start.enabled()
