"""The local executor: one worker process per job attempt on this host, watched until it exits.

A worker talks to the server only over HTTP with its attempt's lease token. When its process exits without
having reported an end, the attempt fails with the exit status, so no job is left running without a worker.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("optimize.scheduler")


class LocalLauncher:
    def __init__(self, server_url: str, log_dir: Path, on_exit: Callable[[str, str, str, str], None]) -> None:
        self.server_url = server_url
        self.log_dir = log_dir
        self.on_exit = on_exit
        self._processes: dict[str, subprocess.Popen] = {}
        self._lock = threading.Lock()
        self.stopping = False  # set while the server shuts down: its workers' exits are not their jobs' failures

    def launch_analysis(self, analysis_id: str, token: str) -> None:
        self._launch("analysis", analysis_id, token, {})

    def launch_run(self, run_id: str, token: str, devices: list[str], profile_kind: str) -> None:
        self._launch("run", run_id, token, device_environment(devices, profile_kind))

    def launch_evaluation(self, evaluation_id: str, token: str, devices: list[str] | None = None,
                          profile_kind: str = "cpu") -> None:
        self._launch("evaluation", evaluation_id, token, device_environment(devices or [], profile_kind))

    def launch_endpoint(self, endpoint_id: str, token: str, devices: list[str] | None = None,
                        profile_kind: str = "cpu") -> None:
        self._launch("endpoint", endpoint_id, token, device_environment(devices or [], profile_kind))

    def kill(self, job_id: str) -> None:
        with self._lock:
            process = self._processes.get(job_id)
        if process is not None and process.poll() is None:
            process.kill()

    def _launch(self, kind: str, job_id: str, token: str, extra_env: dict[str, str]) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{kind}-{job_id}.log"
        env = {**os.environ, "OPTIMIZE_LEASE_TOKEN": token,
               "OPTIMIZE_WORKER_CACHE": str(self.log_dir.parent / "worker-cache"),
               "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"), "TOKENIZERS_PARALLELISM": "false",
               **extra_env}
        command = [sys.executable, "-m", "optimize.worker", kind, job_id, "--server", self.server_url]
        with log_path.open("ab") as sink:
            process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env,
                                       start_new_session=True)
        with self._lock:
            self._processes[job_id] = process
        threading.Thread(target=self._watch, args=(kind, job_id, token, process, log_path), daemon=True).start()

    def _watch(self, kind: str, job_id: str, token: str, process: subprocess.Popen, log_path: Path) -> None:
        code = process.wait()
        with self._lock:
            self._processes.pop(job_id, None)
        if code < 0:
            reason = f"its process was killed by signal {-code} ({signal.Signals(-code).name})"
        elif code != 0:
            tail = _last_line(log_path)
            reason = f"the worker exited with status {code}" + (f": {tail}" if tail else "")
        else:
            reason = "the worker exited without reporting a result"
        try:
            self.on_exit(kind, job_id, token, reason)
        except Exception:  # noqa: BLE001 - a watcher thread must never die silently
            log.exception("recording the end of worker %s failed", job_id)

    def stop_all(self) -> None:
        self.stopping = True
        with self._lock:
            processes = list(self._processes.values())
        for process in processes:
            process.terminate()


def device_environment(devices: list[str], profile_kind: str) -> dict[str, str]:
    """A run's worker sees only its granted GPUs (none on a cpu slot); the allocator reserves close to what it
    allocates unless the deployment configures another setting."""
    visible = ",".join(device.rsplit(":", 1)[1] for device in devices) if profile_kind == "gpu" else ""
    return {"CUDA_VISIBLE_DEVICES": visible,
            "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")}


def _last_line(path: Path) -> str:
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:500] if lines else ""
