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

Protocol, one JSON object per line: the server writes `{"id", "command", "env", "log"}` on stdin; this process
answers `{"ready", "threads", "baseline", "pythonThreads"}` once, `{"id", "pid"}` per request, and
`{"exited", "code"}` per worker that ends (code as `subprocess` gives it: negative for a signal). It ends when
stdin closes — the server is gone; its workers go on.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import json
import os
import select
import signal
import sys
import threading
import traceback

# What the workers of every kind import before their first step (the modules themselves import lazily).
PRELOADED = ("torch", "transformers", "peft", "trl", "datasets", "trl.trainer.sft_trainer", "trl.trainer.dpo_trainer",
             "transformers.models.llama.modeling_llama", "optimize.worker.run", "optimize.worker.evaluation",
             "optimize.worker.endpoint", "optimize.worker.analysis", "optimize.training.engines.harness",
             "optimize.training.methods.sft", "optimize.training.methods.dpo", "optimize.evaluation.generation",
             "optimize.serving.engine")


def main() -> int:
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # what a library prints goes to the log, never into the answers
    importlib.import_module("numpy")
    if importlib.util.find_spec("scipy") is not None:  # its BLAS starts a pool as numpy's does
        importlib.import_module("scipy.linalg")
    importlib.import_module("pyarrow")
    baseline = _native_threads()
    for module in PRELOADED:
        importlib.import_module(module)
    _answer(answers, {"ready": True, "threads": _native_threads(), "baseline": baseline,
                      "pythonThreads": threading.active_count()})
    # a worker's end wakes the loop at once (its exit is how the server learns a worker was lost)
    ended, wake = os.pipe()
    os.set_blocking(wake, False)
    signal.set_wakeup_fd(wake)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    pending = b""
    while True:
        readable, _, _ = select.select([0, ended], [], [], 1.0)
        if ended in readable:
            os.read(ended, 1 << 12)
        if 0 in readable:
            chunk = os.read(0, 1 << 16)
            if not chunk:
                return 0  # the server is gone: its workers go on in their own sessions
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                _answer(answers, _fork(json.loads(line), answers))
        _reap(answers)


def _fork(request: dict, answers) -> dict:
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
        answers.close()
        os.close(became)
        _become(command, request["env"], request["log"])
        os.write(become, b".")
        os.close(become)
        from optimize.worker.__main__ import run_job

        kind, job_id, server = command[3], command[4], command[command.index("--server") + 1]
        code = run_job(kind, job_id, server)
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


def _reap(answers) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _answer(answers, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def _answer(answers, message: dict) -> None:
    answers.write(json.dumps(message) + "\n")


if __name__ == "__main__":
    sys.exit(main())
