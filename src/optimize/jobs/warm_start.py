"""Warm starts for the local executor: workers forked from a process that has imported their libraries already.

A worker started from scratch spends about five seconds of CPU importing torch, Transformers, TRL and PEFT before
its first step. The warm worker (`python -m optimize.worker.warm`, started on the first launch, so a server that
runs no job pays nothing) imports them once and forks each job's worker from there. What a forked worker is — own
session, log, environment, the usual command line — is described in that module.

Only grants without GPUs start warm (the warm worker never initialises CUDA, which a fork cannot carry), and only
when the warm worker says it started no thread a fork would break; otherwise, or when it has died, the executor
starts the worker from scratch as before. Set OPTIMIZE_WARM_WORKERS=0 to always start from scratch.

Where OPTIMIZE_WARM_WORKER_SOCKET names the socket of a warm worker the servers of this machine share
(`python -m optimize.worker.warm RESERVE --listen PATH`), a server forks its workers there instead of starting its
own — when that warm worker imported with the same settings as the server's (it names them in its ready answer);
otherwise, or when nothing answers there, the server starts its own as above.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from optimize.core.environment import setting
from optimize.core.import_settings import import_settings

log = logging.getLogger("optimize.jobs")
READY_SECONDS = 180  # importing takes seconds; a warm worker not ready by then is given up
# set per job, after the fork
PER_JOB = ("OPTIMIZE_LEASE_TOKEN", "OPTIMIZE_SHARED_LEASES", "CUDA_VISIBLE_DEVICES", "PYTORCH_CUDA_ALLOC_CONF")


def enabled() -> bool:
    return setting("OPTIMIZE_WARM_WORKERS")


class WarmChild:
    """A forked worker, handled like a `subprocess.Popen`: poll, wait, kill, terminate."""

    def __init__(self, pid: int, starter: WarmStarter) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._starter = starter
        self._ended = threading.Event()

    def poll(self) -> int | None:
        return self.returncode if self._ended.is_set() else None

    def wait(self, timeout: float | None = None) -> int | None:
        """Its exit code as the warm worker reports it; None when the warm worker died first and the code is
        unknown (it is then watched by its pid). Raises `subprocess.TimeoutExpired` like Popen."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._ended.wait(0.5):
            if not self._starter.alive and not _running(self.pid):
                self._ended.set()
            elif deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout)
        return self.returncode

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def ended(self, code: int) -> None:
        self.returncode = code
        self._ended.set()

    def _signal(self, number: int) -> None:
        if not self._ended.is_set():
            try:
                os.kill(self.pid, number)
            except ProcessLookupError:
                pass


class WarmStarter:
    """The warm worker of one executor: started on first use, asked to fork one worker per job."""

    def __init__(self, env: dict[str, str], log_path: Path, reserve: int) -> None:
        # a forked worker writes its job's environment over the warm worker's; the reserve leaves room for the
        # lease token and device settings it adds
        self._env = {**{k: v for k, v in env.items() if k not in PER_JOB}, "CUDA_VISIBLE_DEVICES": "",
                     "OPTIMIZE_WARM_RESERVE": "-" * 1024}
        self._log_path = log_path
        self._reserve = reserve  # bytes of command line a forked worker may write over the warm worker's
        self._lock = threading.Lock()  # one request at a time; it also guards starting the process
        self._process: subprocess.Popen | None = None
        self._shared: socket.socket | None = None  # connected to the machine's shared warm worker instead
        self._outgoing = None  # where requests are written: the process's stdin, or the shared socket
        self._connected = False
        self._ready = threading.Event()
        self._usable = False
        self._replies: dict[int, dict] = {}
        self._replied = threading.Condition()
        self._children: dict[int, WarmChild] = {}
        self._early: dict[int, int] = {}  # exits reported before their fork's reply was handled
        self._next = 0

    @property
    def alive(self) -> bool:
        if self._shared is not None:
            return self._connected
        return self._process is not None and self._process.poll() is None

    def start(self, command: list[str], env: dict[str, str], log_path: Path) -> WarmChild | None:
        """Fork the worker `command` describes; None when it must be started from scratch instead."""
        with self._lock:
            if not self._warm() or len(b"\0".join(part.encode() for part in command)) >= self._reserve:
                return None
            self._next += 1
            request = {"id": self._next, "command": command, "env": env, "log": str(log_path)}
            try:
                self._outgoing.write((json.dumps(request) + "\n").encode())
                self._outgoing.flush()
            except OSError:
                return None
            with self._replied:
                if not self._replied.wait_for(lambda: request["id"] in self._replies or not self.alive, 30):
                    return None
                reply = self._replies.pop(request["id"], {})
            if "pid" not in reply:
                log.warning("the warm worker could not fork %s: %s", command[3:5], reply.get("error", "it ended"))
                return None
            child = WarmChild(reply["pid"], self)
            with self._replied:
                self._children[child.pid] = child
                code = self._early.pop(child.pid, None)
            if code is not None:
                child.ended(code)
            return child

    def close(self) -> None:
        """The warm worker ends (its stdin closes), or this server leaves the shared one; the workers go on."""
        if self._outgoing is not None:
            try:
                self._outgoing.close()
            except OSError:
                pass
        if self._shared is not None:
            try:
                self._shared.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    # ---------------------------------------------------------------------------------------------------------

    def _warm(self) -> bool:
        if self._process is None and self._shared is None:
            if not self._join_shared():
                self._start_own()
            if not self._ready.wait(READY_SECONDS):
                log.warning("the warm worker was not ready after %ss; workers start from scratch", READY_SECONDS)
        return self._usable and self.alive

    def _start_own(self) -> None:
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        with self._log_path.open("ab") as sink:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "optimize.worker.warm", "-" * self._reserve], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=sink, env=self._env, start_new_session=True)
        self._outgoing = self._process.stdin
        threading.Thread(target=self._read, args=(self._process.stdout,), daemon=True, name="warm-worker").start()

    def _join_shared(self) -> bool:
        """Connect to the machine's shared warm worker, if one is named, answers, and imported with this server's
        settings; False leaves this server to start its own."""
        path = setting("OPTIMIZE_WARM_WORKER_SOCKET", self._env)
        if path is None:
            return False
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.settimeout(READY_SECONDS)
            connection.connect(str(path))
            incoming = connection.makefile("rb")
            ready = json.loads(incoming.readline() or b"{}")
            connection.settimeout(None)
        except (OSError, ValueError) as error:
            log.warning("the shared warm worker at %s did not answer (%s); this server starts its own", path, error)
            connection.close()
            return False
        differing = _differing(ready.get("settings", {}), import_settings(self._env), ready.get("setByImports", []))
        if differing:
            log.warning("the shared warm worker at %s started with other settings (%s); this server starts its own",
                        path, ", ".join(differing))
            connection.close()
            return False
        self._shared, self._connected = connection, True
        self._outgoing = connection.makefile("wb")
        self._reserve = ready["reserve"]
        self._take_ready(ready)
        threading.Thread(target=self._read, args=(incoming,), daemon=True, name="warm-worker").start()
        return True

    def _take_ready(self, message: dict) -> None:
        # threads beyond the baseline its docstring names, or a Python thread, make a fork unsafe
        self._usable = message["threads"] == message["baseline"] and message["pythonThreads"] == 1
        if not self._usable:
            log.warning("the warm worker runs %s threads (%s expected), so it cannot fork safely; workers "
                        "start from scratch", message["threads"], message["baseline"])
        self._ready.set()

    def _read(self, incoming) -> None:
        for line in incoming:
            message = json.loads(line)
            if "ready" in message:
                self._take_ready(message)
            elif "exited" in message:
                with self._replied:
                    child = self._children.pop(message["exited"], None)
                    if child is None:
                        self._early[message["exited"]] = message["code"]
                if child is not None:
                    child.ended(message["code"])
            else:
                with self._replied:
                    self._replies[message["id"]] = message
                    self._replied.notify_all()
        if self._process is not None:
            self._process.wait()
        self._connected = False
        self._ready.set()
        with self._replied:
            self._replied.notify_all()


def _differing(theirs: dict[str, str], ours: dict[str, str], set_by_imports: list[str]) -> list[str]:
    """The settings a shared warm worker and this server disagree on, less those its imports set themselves (a
    server whose process imported the same library has them too, or will have them in its workers)."""
    return sorted(key for key in set(theirs) | set(ours)
                  if key not in set_by_imports and theirs.get(key) != ours.get(key))


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
