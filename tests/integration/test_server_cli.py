"""`akka server start|status`, the console scripts, and errors without tracebacks."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.integration
AKKA = str(REPO / ".venv" / "bin" / "akka") if (REPO / ".venv" / "bin" / "akka").exists() else "akka"


def test_status_reports_a_running_server(cli, server):
    status = cli.json("server", "status")
    assert status["reachable"] is True and status["server"] == server.url


def test_status_without_a_server_exits_one(capsys):
    from tests.conftest import Cli

    cli = Cli(capsys, "http://127.0.0.1:9")
    text = cli("server", "status")
    assert text.code == 1 and text.out == ""
    assert "error: no Optimize server answers at http://127.0.0.1:9" in text.err and "akka server start" in text.err
    result = cli("server", "status", "-o", "json")
    assert result.code == 1 and result.err == ""
    hint = "start one with: akka server start, or point --server / OPTIMIZE_URL at one"
    assert result.json == {"error": {"message": "no Optimize server answers at http://127.0.0.1:9 (ConnectError)",
                                     "code": "unreachable", "status": None, "hint": hint}}


def test_status_of_something_else_answering_exits_one(capsys):
    """An HTTP server that is not Optimize (404 for /v1/health) is not a running Optimize server."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from tests.conftest import Cli

    class NotOptimize(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the name http.server dispatches to
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_args):
            pass

    other = ThreadingHTTPServer(("127.0.0.1", 0), NotOptimize)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{other.server_address[1]}"
        result = Cli(capsys, url)("server", "status", "-o", "json-compact")
    finally:
        other.shutdown()
        other.server_close()
    assert result.code == 1 and result.out.count("\n") == 1 and result.err == ""
    error = result.json["error"]
    assert error["message"] == f"{url} does not answer as an Optimize server: the server answered 404 Not Found"
    assert error["status"] == 404 and error["hint"]


def test_json_modes_print_errors_as_json_on_stdout(capsys):
    from tests.conftest import Cli

    cli = Cli(capsys, "http://127.0.0.1:9")
    for mode in (["-o", "json"], ["-o", "json-compact"], ["--jq", ".datasets[].dataset"]):
        result = cli("registry", "datasets", "list", *mode)
        assert result.code == 1 and result.err == "", mode  # the exit code of text mode; nothing on stderr
        assert result.json["error"]["code"] == "unreachable"  # --jq filters results, never the error
        assert (result.out.count("\n") == 1) == (mode[-1] == "json-compact")  # one line, or indented


def test_usage_errors_in_json_modes(capsys, sqlite_server):
    from tests.conftest import Cli

    cli = Cli(capsys, sqlite_server.url)
    ours = cli("registry", "datasets", "get", "no-slash", "-o", "json")  # the command's own check of its argument
    assert ours.code == 2 and ours.err == ""
    assert ours.json["error"]["code"] == "usage" and "'no-slash' is not of the form NS/NAME" in \
        ours.json["error"]["message"]
    assert ours.json["error"]["hint"] == "see: akka registry datasets get --help"
    text = cli("registry", "datasets", "get", "no-slash")
    assert text.code == 2 and text.out == "" and "is not of the form NS/NAME" in text.err
    bad_jq = cli("server", "status", "--jq", ".[")
    assert bad_jq.code == 2 and bad_jq.err == ""
    assert bad_jq.json["error"]["code"] == "usage" and bad_jq.json["error"]["message"].startswith("--jq '.[' failed")
    # Click's own usage errors (an unknown option, a missing argument) come before -o is read: on stderr, exit 2
    clicks = cli("registry", "datasets", "get", "-o", "json", "--no-such-option")
    assert clicks.code == 2 and clicks.out == "" and "No such option" in clicks.err


def test_shell_completion(capsys):
    from optimize.cli.main import main

    assert main(["--help"]) == 0 and "--install-completion" in capsys.readouterr().out
    # the shell is detected from the parent process; Typer's switch (read as the command tree is built, so in a
    # process of its own) makes it an argument, whatever runs pytest
    shown = subprocess.run([AKKA, "--show-completion", "bash"], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"})
    assert shown.returncode == 0, shown.stderr
    script = shown.stdout
    assert "_AKKA_COMPLETE=complete_bash" in script and "complete -o default -F _akka_completion akka" in script
    env = {**os.environ, "_AKKA_COMPLETE": "complete_bash", "COMP_WORDS": "akka training runs st", "COMP_CWORD": "3"}
    done = subprocess.run([AKKA], capture_output=True, text=True, timeout=60, env=env)  # what the shell asks
    assert done.returncode == 0 and done.stdout.split() == ["start"]


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


def test_the_version_is_printed_and_answered_as_json(capsys):
    from optimize import __version__
    from tests.conftest import Cli

    cli = Cli(capsys, "http://127.0.0.1:9")  # no server needed
    assert cli.ok("version").out.strip() == __version__
    assert cli.ok("--version").out.strip() == __version__
    assert cli.json("version") == {"version": __version__}


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
