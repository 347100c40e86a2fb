"""`python -m optimize.worker.warm RESERVE`: a worker started ahead of its jobs, which forks one per job.

Importing torch, Transformers, TRL and PEFT takes a worker about five seconds of CPU before it does any work. This
process imports them once, then forks a worker per request, which starts at once with them loaded. A forked
worker is the same as a started one: its own session (it outlives the server), its log file, the job's environment,
and the command line `python -m optimize.worker KIND JOB_ID --server URL` written over this process's own (RESERVE
is padding that keeps room for it), so the executor, `ps` and a restarted server find it as they find any worker.

Only jobs without GPUs come here: this process never initialises CUDA, so a fork of it is safe. Forking a process
whose threads hold locks can leave a lock held forever in the child, so this process runs no Python thread and
reports its native threads: the few that numpy's OpenBLAS and pyarrow's jemalloc start on import (both re-arm
themselves in a forked child) are its baseline — and scipy's own OpenBLAS where scipy is installed, since
Transformers imports it when it can; one more — torch's OpenMP pool, say — and the server does not use it.

`python -m optimize.worker.warm RESERVE --listen PATH` is the same process shared by the servers of one machine: it
listens on the Unix socket PATH (OPTIMIZE_WARM_WORKER_SOCKET names it to the servers) and speaks the protocol below
with each server that connects, reporting a worker's end to the server that asked for it. Its ready answer names
the settings it started with (`settings`: the OPTIMIZE_* settings workers read and the libraries' variables,
`core.import_settings`) and those its imports set themselves (`setByImports`, torch's cache folder say); a server
whose own differ in any other starts a warm worker of its own. It ends when it is stopped (SIGTERM); a server
going away ends nothing.

Protocol, one JSON object per line: the server writes `{"id", "command", "env", "log"}` on stdin (or the socket);
this process answers `{"ready", "threads", "baseline", "pythonThreads", "reserve", "settings", "setByImports"}`
once, `{"id", "pid"}` per request, and `{"exited", "code"}` per worker that ends (code as `subprocess` gives it:
negative for a signal). It ends when stdin closes — the server is gone; its workers go on.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import json
import os
import select
import signal
import socket
import sys
import threading
import traceback

from optimize.core.import_settings import import_settings, with_worker_defaults

# What the workers of every kind import before their first step (the modules themselves import lazily).
PRELOADED = ("torch", "transformers", "peft", "trl", "datasets", "trl.trainer.sft_trainer", "trl.trainer.dpo_trainer",
             "transformers.models.llama.modeling_llama", "optimize.worker.run", "optimize.worker.evaluation",
             "optimize.worker.endpoint", "optimize.worker.analysis", "optimize.training.engines.harness",
             "optimize.training.methods.sft", "optimize.training.methods.dpo", "optimize.evaluation.generation",
             "optimize.serving.engine")


def main() -> int:
    if sys.argv[2:3] == ["--listen"]:
        return _listen(sys.argv[3])
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # what a library prints goes to the log, never into the answers
    _answer(answers, _prepare())
    ended = _on_worker_end()
    pending = b""
    while True:
        readable, _, _ = select.select([0, ended], [], [], 1.0)
        if ended in readable:
            os.read(ended, 1 << 12)
        if 0 in readable:
            chunk = os.read(0, 1 << 16)
            if not chunk:
                return 0  # the server is gone: its workers go on in their own sessions
            lines, pending = _complete_lines(pending + chunk)
            for line in lines:
                _answer(answers, _fork(json.loads(line), [answers]))
        for pid, code in _reaped():
            _answer(answers, {"exited": pid, "code": code})


def _prepare() -> dict:
    """Import what workers use; the ready answer."""
    settings = import_settings(dict(os.environ))  # as started: some libraries set variables of their own on import
    importlib.import_module("numpy")
    if importlib.util.find_spec("scipy") is not None:  # its BLAS starts a pool as numpy's does
        importlib.import_module("scipy.linalg")
    importlib.import_module("pyarrow")
    baseline = _native_threads()
    for module in PRELOADED:
        importlib.import_module(module)
    imported = import_settings(dict(os.environ))
    return {"ready": True, "threads": _native_threads(), "baseline": baseline,
            "pythonThreads": threading.active_count(), "reserve": len(sys.argv[1].encode()),
            "settings": settings, "setByImports": sorted(k for k in imported if settings.get(k) != imported[k])}


def _on_worker_end() -> int:
    """A pipe that wakes the loop at once when a worker ends (its exit is how a server learns a worker was lost)."""
    ended, wake = os.pipe()
    os.set_blocking(wake, False)
    signal.set_wakeup_fd(wake)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    return ended


class _Server:
    """One connected server: its socket, what it has sent of a line so far, and where its answers go."""

    def __init__(self, connection: socket.socket) -> None:
        self.connection = connection
        self.answers = connection.makefile("w")
        self.pending = b""

    def close(self) -> None:
        for end in (self.answers, self.connection):
            try:
                end.close()
            except OSError:
                pass


def _listen(path: str) -> int:
    """The shared warm worker: bound first (a server that connects while it imports waits for its ready answer),
    then one loop over the socket, the servers and the workers' ends."""
    if sys.argv[4:] != ["--padded"]:  # started again with room to write each worker's environment over its own
        os.execve(sys.executable, [sys.executable, "-m", "optimize.worker.warm", *sys.argv[1:4], "--padded"],
                  {**with_worker_defaults(dict(os.environ)), "OPTIMIZE_WARM_RESERVE": "-" * 4096,
                   "CUDA_VISIBLE_DEVICES": ""})
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists(path):
        os.unlink(path)  # a socket left by one that was killed
    listener.bind(path)
    listener.listen(64)
    ready = _prepare()
    ended = _on_worker_end()
    servers: dict[int, _Server] = {}
    asked_by: dict[int, _Server] = {}  # worker pid -> the server that asked for it
    while True:
        readable, _, _ = select.select([listener, ended, *(s.connection for s in servers.values())], [], [], 1.0)
        if ended in readable:
            os.read(ended, 1 << 12)
        if listener in readable:
            connection, _ = listener.accept()
            server = servers[connection.fileno()] = _Server(connection)
            _tell(server, ready)
        for server in [servers[c.fileno()] for c in readable if c not in (listener, ended)]:
            try:
                chunk = server.connection.recv(1 << 16)
            except OSError:
                chunk = b""
            if not chunk:  # that server is gone: its workers go on, their ends go unreported
                del servers[server.connection.fileno()]
                server.close()
                continue
            lines, server.pending = _complete_lines(server.pending + chunk)
            for line in lines:
                closing = [listener, *(s for other in servers.values() for s in (other.answers, other.connection))]
                answer = _fork(json.loads(line), closing)
                if "pid" in answer:
                    asked_by[answer["pid"]] = server
                _tell(server, answer)
        for pid, code in _reaped():
            server = asked_by.pop(pid, None)
            if server is not None and servers.get(server.connection.fileno()) is server:
                _tell(server, {"exited": pid, "code": code})


def _complete_lines(received: bytes) -> tuple[list[bytes], bytes]:
    """The whole lines received so far, and the start of the next one."""
    *lines, rest = received.split(b"\n")
    return lines, rest


def _tell(server: _Server, message: dict) -> None:
    try:
        _answer(server.answers, message)
    except OSError:  # it went away; its end is read on the next turn of the loop
        pass


def _fork(request: dict, closing: list) -> dict:
    command = request["command"]
    sys.stdout.flush()
    sys.stderr.flush()
    became, become = os.pipe()
    pid = os.fork()
    if pid:
        os.close(become)
        select.select([became], [], [], 10)  # answered once the worker shows its job's identity (or is gone)
        os.close(became)
        return {"id": request["id"], "pid": pid}
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for end in closing:  # the answers and sockets are the warm worker's, never a worker's
            end.close()
        os.close(became)
        _become(command, request["env"], request["log"])
        os.write(become, b".")
        os.close(become)
        from optimize.worker.__main__ import serve

        code = serve(command[3:])
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:  # noqa: BLE001 - the worker's own edge: its log tells what happened
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _become(command: list[str], env: dict[str, str], log: str) -> None:
    """Turn the fork into the job's worker: session, output, environment, command line."""
    os.setsid()
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    nothing = os.open(os.devnull, os.O_RDONLY)
    os.dup2(nothing, 0)
    os.close(nothing)
    os.environ.clear()  # the C environment no longer points into the block written over below
    os.environ.update(env)
    _write_over("arg", [part.encode() for part in command])
    _write_over("env", [f"{key}={value}".encode() for key, value in env.items()])


def _write_over(area: str, entries: list[bytes]) -> None:
    """Write NUL-separated `entries` over this process's command line ("arg") or environment ("env") as
    /proc/PID/cmdline and /proc/PID/environ show them, padded with NULs: what `ps` and the executor read. The warm
    worker was started with room to spare in both (its padding argument and OPTIMIZE_WARM_RESERVE)."""
    with open("/proc/self/stat", "rb") as stat:
        fields = stat.read().rsplit(b")", 1)[1].split()
    # arg_start, arg_end, env_start, env_end are fields 48 to 51 of /proc/PID/stat
    start, end = (int(fields[45]), int(fields[46])) if area == "arg" else (int(fields[47]), int(fields[48]))
    block = b"\0".join(entries) + b"\0"
    if len(block) > end - start:
        raise RuntimeError(f"the worker's {area} block needs {len(block)} bytes, {end - start} were reserved")
    ctypes.memmove(start, block.ljust(end - start, b"\0"), end - start)


def _native_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _reaped() -> list[tuple[int, int]]:
    """The workers that ended since the last look, with their codes."""
    ended = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return ended
        if pid == 0:
            return ended
        ended.append((pid, os.waitstatus_to_exitcode(status)))


def _answer(answers, message: dict) -> None:
    answers.write(json.dumps(message) + "\n")
    answers.flush()  # a socket's text file is not line-buffered, whatever it was asked for


if __name__ == "__main__":
    sys.exit(main())
