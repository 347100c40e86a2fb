"""Hostile scoring bundles against the bubblewrap sandbox: each attempt (read the admin token, the database, another
project's blob, the server's source or environment; write the data dir; reach a listener on 127.0.0.1; leave a
daemon behind; allocate 4 GiB; loop forever; print 100 MB; fork without end) is contained, and the sample's error
names what happened, cut to a bound. Without a sandbox the runner refuses, naming bubblewrap and the unsafe opt-out,
which runs bundles the old way."""

from __future__ import annotations

import os
import shutil
import socket
import sqlite3
import stat
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from optimize.core.errors import Unavailable
from optimize.scoring import BundleRunner, Sample, Score
from optimize.scoring.bundle_runner import MAX_ERROR_CHARS

SECRET = "s3cr3t-admin-token-0123456789abcdef"
HOSTILE = '''
import _socket
import os
import socket
import sqlite3
import subprocess
import sys
import time


def compute_score(prompt_messages, completion_text, fields):
    what, arg = completion_text, fields.get("arg")
    if what == "read":
        with open(arg) as handle:
            raise ValueError(f"read {handle.read()!r}")
    if what == "list":
        raise ValueError(f"listed {os.listdir(arg)!r}")
    if what == "database":
        rows = sqlite3.connect(arg).execute("select token from secrets").fetchall()
        raise ValueError(f"read {rows!r}")
    if what == "write":
        with open(arg, "w") as handle:
            handle.write("planted")
        return 1.0
    if what == "connect":
        socket.create_connection(("127.0.0.1", arg), timeout=1)
        return 1.0
    if what == "raw-connect":
        raw = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
        raw.settimeout(1)
        raw.connect(("127.0.0.1", arg))
        return 1.0
    if what == "daemon":
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(120)", arg])
            os._exit(0)
        os.wait()
        return 1.0
    if what == "memory":
        hoard = bytearray(4 * 1024 * 1024 * 1024)
        return float(len(hoard))
    if what == "loop":
        while True:
            pass
    if what == "print":
        chunk = "x" * (1024 * 1024)
        for _ in range(100):
            print(chunk)
            sys.stderr.write(chunk)
        return 1.0
    if what == "environ":
        with open("/proc/1/environ", "rb") as handle:
            raise ValueError(f"read {handle.read()!r}")
    if what == "env":
        raise ValueError(f"env {dict(os.environ)!r}")
    if what == "processes":
        raise ValueError(f"pids {sorted(int(p) for p in os.listdir('/proc') if p.isdigit())!r}")
    if what == "fork":
        forked = 0
        for _ in range(arg):
            if os.fork() == 0:
                time.sleep(3)
                os._exit(0)
            forked += 1
        return float(forked)
    if what == "long":
        raise ValueError("x" * 1_000_000)
    return 1.0
'''


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> dict[str, Path]:
    """What a server holds on this host: a data dir with its admin token, database and blobs, and a secret outside
    /tmp (the sandbox's /tmp is a private tmpfs, so a path there would be missing anyway)."""
    data = tmp_path_factory.mktemp("data-dir")
    (data / "admin-token").write_text(SECRET)
    database = data / "optimize.db"
    with sqlite3.connect(database) as db:
        db.execute("create table secrets (token text)")
        db.execute("insert into secrets values (?)", (SECRET,))
    blob = data / "blobs" / "sha256" / "ab" / ("ab" + "0" * 62)
    blob.parent.mkdir(parents=True)
    blob.write_text(f"another project's rows: {SECRET}")
    outside = Path(tempfile.mkdtemp(prefix=".optimize-sandbox-test-", dir=Path.home()))
    (outside / "admin-token").write_text(SECRET)
    bundle = tmp_path_factory.mktemp("hostile")
    (bundle / "hostile.py").write_text(textwrap.dedent(HOSTILE))
    yield {"data": data, "database": database, "blob": blob, "outside": outside, "bundle": bundle}
    shutil.rmtree(outside, ignore_errors=True)


@pytest.fixture(scope="module")
def runner(host):
    with BundleRunner(host["bundle"], "hostile", time_limit_s=1.5, memory_limit_mb=512, label="acme/hostile:v1") as r:
        yield r


def attempt(what: str, arg: object = None) -> Sample:
    return Sample(prompt=[{"role": "user", "content": "hi"}], completion=what, expected=None, fields={"arg": arg})


def contained(score: Score, *names: str) -> str:
    """The error of a sample that got no value, bounded and free of the secret, naming one of `names`."""
    assert score.value is None, score
    assert score.error and len(score.error) <= MAX_ERROR_CHARS
    assert SECRET not in score.error
    assert any(name in score.error for name in names), score.error
    return score.error


def test_the_runner_says_it_runs_in_the_sandbox(runner):
    assert runner.score([attempt("nothing")]) == [Score(1.0)]
    assert runner.isolation == "bubblewrap sandbox"


def test_the_data_dir_the_database_and_the_blobs_are_not_there(runner, host):
    token, database, blob, listing = runner.score([
        attempt("read", str(host["data"] / "admin-token")), attempt("database", str(host["database"])),
        attempt("read", str(host["blob"])), attempt("list", str(host["data"]))])
    contained(token, "FileNotFoundError")
    # sqlite makes an empty database of a missing file where it may write (the private /tmp): no table there
    contained(database, "unable to open database file", "no such table: secrets")
    contained(blob, "FileNotFoundError")
    contained(listing, "FileNotFoundError")


def test_nothing_outside_tmp_is_there_either(runner, host):
    home, source, root = runner.score([
        attempt("read", str(host["outside"] / "admin-token")),
        attempt("read", str(Path(__file__).resolve().parents[2] / "src" / "optimize" / "__init__.py")),
        attempt("list", str(host["outside"].parent))])
    contained(home, "FileNotFoundError", "PermissionError")
    contained(source, "FileNotFoundError")
    # HOME's folder holds at most what the sandbox made for a bind inside it (a Python installed there)
    assert host["outside"].name not in contained(root, "FileNotFoundError", "PermissionError", "ValueError: listed")


def test_writes_stay_in_the_sandbox(runner, host):
    data, bundle, home = runner.score([
        attempt("write", str(host["data"] / "planted")), attempt("write", "hostile.py"),
        attempt("write", str(host["outside"] / "planted"))])
    contained(data, "FileNotFoundError")
    contained(bundle, "Read-only file system")
    contained(home, "FileNotFoundError", "PermissionError", "Read-only file system")
    assert not (host["data"] / "planted").exists() and not (host["outside"] / "planted").exists()
    assert (host["bundle"] / "hostile.py").read_text() == textwrap.dedent(HOSTILE)
    # its private /tmp takes a write, and is gone with the sandbox
    assert runner.score([attempt("write", "/tmp/scratch")]) == [Score(1.0)]


def test_no_network_even_below_the_guard(runner):
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    accepted: list[object] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(listener.accept())
            except OSError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        port = listener.getsockname()[1]
        guarded, raw = runner.score([attempt("connect", port), attempt("raw-connect", port)])
    finally:
        stop.set()
        thread.join(5)
        listener.close()
    contained(guarded, "scoring bundles have no network")
    contained(raw, "ConnectionRefusedError", "Network is unreachable", "OSError")
    assert accepted == []


def test_the_servers_environment_and_processes_are_not_seen(host, monkeypatch):
    monkeypatch.setenv("OPTIMIZE_ADMIN_TOKEN", SECRET)
    monkeypatch.setenv("OPTIMIZE_DATABASE_URL", f"postgresql://optimize:{SECRET}@db/optimize")
    with BundleRunner(host["bundle"], "hostile", time_limit_s=1.5) as fresh:
        environ, env, pids = fresh.score([attempt("environ"), attempt("env"), attempt("processes")])
    contained(environ, "ValueError: read", "PermissionError")
    assert "OPTIMIZE_" not in environ.error
    contained(env, "ValueError: env")
    assert "OPTIMIZE_" not in env.error and "'HOME': '/tmp'" in env.error
    # bwrap's init and the scoring process: no process of the host
    listed = contained(pids, "ValueError: pids")
    assert listed.startswith("ValueError: pids [1, 2]") and len(listed.split(",")) <= 3, listed


def _marked(marker: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if marker in (process.info["cmdline"] or []):
            found.append(process)
    return found


def test_a_daemon_does_not_outlive_its_sandbox(host):
    marker = f"optimize-daemon-{os.getpid()}-{time.monotonic_ns()}"
    fresh = BundleRunner(host["bundle"], "hostile", time_limit_s=1.5)
    try:
        assert fresh.score([attempt("daemon", marker)]) == [Score(1.0)]
        deadline = time.monotonic() + 5
        while not _marked(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        daemons = _marked(marker)
        assert daemons, "the daemon never started"
        assert all(d.uids().real != 0 for d in daemons)  # it ran as the sandbox's own user, not root
    finally:
        fresh.close()
    deadline = time.monotonic() + 5
    while _marked(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _marked(marker) == []


def test_memory_time_and_output_are_bounded(runner, capfd):
    started = time.monotonic()
    memory, loop, printed, after = runner.score([attempt("memory"), attempt("loop"), attempt("print"),
                                                 attempt("nothing")])
    contained(memory, "MemoryError: ran out of memory (the limit is 512 MiB)")
    assert loop == Score(None, "took longer than 1.5 s")
    assert printed == Score(1.0) and after == Score(1.0)
    assert time.monotonic() - started < 20
    out, err = capfd.readouterr()
    assert len(out) + len(err) < 10_000  # the bundle's 200 MB of output reached neither stream of the server


def test_processes_are_bounded(host):
    with BundleRunner(host["bundle"], "hostile", time_limit_s=5, process_limit=16) as fresh:
        forked, = fresh.score([attempt("fork", 200)])
    contained(forked, "BlockingIOError", "Resource temporarily unavailable")


def test_an_error_text_is_cut_to_a_bound(runner):
    long, = runner.score([attempt("long")])
    assert long.value is None and len(long.error) <= MAX_ERROR_CHARS and long.error.startswith("ValueError: xxx")


def test_without_bubblewrap_bundles_are_refused_unless_the_operator_opts_out(host, tmp_path, monkeypatch):
    monkeypatch.setenv("OPTIMIZE_BWRAP", str(tmp_path / "no-bwrap"))
    with pytest.raises(Unavailable) as caught:
        BundleRunner(host["bundle"], "hostile", label="acme/hostile:v1").check()
    assert caught.value.message.startswith("the scoring bundle acme/hostile:v1 cannot run: scoring bundles run only "
                                           "in a bubblewrap sandbox, and OPTIMIZE_BWRAP names")
    assert "OPTIMIZE_UNSANDBOXED_BUNDLES=1" in caught.value.hint and "unsafe" in caught.value.hint
    # a bwrap that does not start a sandbox is refused by its self-test, with what it said
    broken = tmp_path / "bwrap"
    broken.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    broken.chmod(broken.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("OPTIMIZE_BWRAP", str(broken))
    with pytest.raises(Unavailable, match="does not start one here: it exited with code 1: bwrap: No permissions"):
        BundleRunner(host["bundle"], "hostile").check()
    monkeypatch.setenv("OPTIMIZE_UNSANDBOXED_BUNDLES", "1")
    with BundleRunner(host["bundle"], "hostile") as unsafe:
        assert unsafe.score([attempt("nothing")]) == [Score(1.0)]
        assert unsafe.isolation.startswith("no sandbox (")
