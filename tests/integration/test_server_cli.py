"""`akka server start|status`, the console scripts, and errors without tracebacks."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.integration
AKKA = str(REPO / ".venv" / "bin" / "akka") if (REPO / ".venv" / "bin" / "akka").exists() else "akka"


def test_status_reports_a_running_server(cli, server):
    status = cli.json("server", "status")
    assert status["reachable"] is True and status["server"] == server.url


def test_status_without_a_server_still_exits_zero(capsys):
    from tests.conftest import Cli

    result = Cli(capsys, "http://127.0.0.1:9")("server", "status", "-o", "json")
    assert result.code == 0 and result.json["reachable"] is False


def test_commands_without_a_server_say_so_without_traceback(capsys):
    from tests.conftest import Cli

    result = Cli(capsys, "http://127.0.0.1:9")("registry", "datasets", "list")
    assert result.code == 1
    assert "no Optimize server answers at http://127.0.0.1:9" in result.err
    assert "akka server start" in result.err and "Traceback" not in result.err


@pytest.mark.parametrize("entry", [[AKKA], [sys.executable, "-m", "optimize"]])
def test_entry_points_run(entry):
    done = subprocess.run([*entry, "registry", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "datasets" in done.stdout


def test_usage_error_exits_two():
    done = subprocess.run([sys.executable, "-m", "optimize", "registry", "datasets", "get"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr


def test_optimize_spelling_reaches_the_same_commands(capsys, sqlite_server):
    from tests.conftest import Cli

    assert "maxShards" in Cli(capsys, sqlite_server.url).ok("optimize", "registry", "info", "-o", "json").out


def test_port_in_use_is_refused(sqlite_server):
    port = sqlite_server.url.rsplit(":", 1)[1]
    done = subprocess.run([sys.executable, "-m", "optimize", "server", "start", "--port", port, "--data-dir",
                           str(sqlite_server.data_dir / "other")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and f"cannot listen on 127.0.0.1:{port}" in done.stderr
