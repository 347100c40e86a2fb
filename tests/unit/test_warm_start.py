"""Warm starts: a worker forked from the warm worker is what a started one is — its own session, the job's command
line and environment as /proc shows them (what the executor, `ps` and a restarted server read), its log — and
its exit reaches the server with its code. The run, evaluation and endpoint flows and the fault tests run every
cpu job this way; this test pins the fork itself."""

from __future__ import annotations

import os
import sys

import psutil
import pytest

from optimize.core.import_settings import with_worker_defaults
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


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """A warm worker listening on a socket, as the servers of one machine share it, started the way its setting's
    description says (it gives itself the variables every worker runs with)."""
    import subprocess
    import time

    folder = tmp_path_factory.mktemp("shared-warm")
    socket_path = folder / "warm.sock"
    env = {"PATH": os.environ["PATH"], "HOME": str(folder)}
    process = subprocess.Popen([sys.executable, "-m", "optimize.worker.warm", "-" * 4096, "--listen",
                                str(socket_path)], env=env, stderr=(folder / "shared.log").open("wb"))
    deadline = time.monotonic() + 60
    while not socket_path.exists():
        assert process.poll() is None and time.monotonic() < deadline, (folder / "shared.log").read_text()
        time.sleep(0.05)
    yield process, socket_path, env, folder
    process.terminate()
    process.wait(10)


def test_a_server_with_the_shared_warm_workers_settings_forks_there_and_hears_its_workers_end(shared):
    process, socket_path, env, folder = shared
    # the server's environment as the executor gives it: the warm worker's, its socket named, per-server paths
    # (torch sets its cache folder as it is imported: a server whose process imported torch has it too)
    # and a setting only servers read, which makes no difference to a worker
    server_env = {**with_worker_defaults(env), "OPTIMIZE_WARM_WORKER_SOCKET": str(socket_path),
                  "OPTIMIZE_SERVER_FILE": str(folder / "absent.json"), "TORCHINDUCTOR_CACHE_DIR": "/elsewhere",
                  "OPTIMIZE_LEASE_SECONDS": "30"}
    starter = WarmStarter(server_env, folder / "own.log", reserve=400)
    command = [sys.executable, "-m", "optimize.worker", "run", "1" * 32, "--server", "http://127.0.0.1:9"]
    child = starter.start(command, {**server_env, "OPTIMIZE_LEASE_TOKEN": "t" * 32}, folder / "worker.log")
    assert child is not None and starter._process is None  # no warm worker of its own
    assert psutil.Process(child.pid).ppid() == process.pid  # forked by the shared one
    assert [part for part in psutil.Process(child.pid).cmdline() if part] == command
    child.terminate()
    assert child.wait(30) == -15  # its end reaches the server that asked for it
    starter.close()
    assert not (folder / "own.log").exists()


def test_a_server_with_other_settings_warms_its_own(shared, caplog):
    process, socket_path, env, folder = shared
    other = {**with_worker_defaults(env), "OPTIMIZE_ENDPOINT_BATCH": "4",
             "OPTIMIZE_WARM_WORKER_SOCKET": str(socket_path)}
    starter = WarmStarter(other, folder / "other.log", reserve=400)
    command = [sys.executable, "-m", "optimize.worker", "run", "2" * 32, "--server", "http://127.0.0.1:9"]
    child = starter.start(command, {**other, "OPTIMIZE_LEASE_TOKEN": "t" * 32}, folder / "other-worker.log")
    assert child is not None and starter._process is not None  # its own warm worker forked it
    assert psutil.Process(child.pid).ppid() == starter._process.pid != process.pid
    assert "started with other settings (OPTIMIZE_ENDPOINT_BATCH)" in caplog.text
    child.kill()
    assert child.wait(30) == -9
    starter.close()


def test_a_server_whose_shared_warm_worker_does_not_answer_says_so_and_warms_its_own(tmp_path, caplog):
    absent = tmp_path / "nobody.sock"
    starter = WarmStarter({**with_worker_defaults({"PATH": os.environ["PATH"]}),
                           "OPTIMIZE_WARM_WORKER_SOCKET": str(absent)}, tmp_path / "warm.log", reserve=400)
    assert starter._join_shared() is False and starter._shared is None
    assert f"the shared warm worker at {absent} did not answer" in caplog.text
    assert "this server starts its own" in caplog.text
