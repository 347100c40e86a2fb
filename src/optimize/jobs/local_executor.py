"""The local executor: one worker process per job attempt on this host, watched until it exits.

Workers are found by their command line (`python -m optimize.worker KIND JOB_ID`), so a server process can find
and stop the workers an earlier one started (after a crash it holds no handles to them). A worker without GPUs is
forked from a warm worker (jobs/warm_start.py) with that same command line, or else started from scratch. A
worker learns where the server answers from the server file in the data dir, so it reaches a server restarted on
another port. Each attempt's stdout and stderr go to a log of its own (jobs/logs.py reads them back).

Jobs granted together (`Grant.shared_with`) run in one worker process, `… KIND JOB_ID --server URL --shared-with
ID,ID`, their lease tokens in OPTIMIZE_SHARED_LEASES; each job's log is a link to that process's. Stopping one of
them while others it serves hold the device on leaves the process to them (the job's own work stops by its lease);
the last one's stop, or a lost worker, ends the process.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psutil

from optimize.core.import_settings import with_worker_defaults
from optimize.jobs import logs, warm_start
from optimize.jobs.executor import ExitCallback
from optimize.jobs.leases import Grant

log = logging.getLogger("optimize.jobs")
KILL_WAIT_SECONDS = 15


class LocalExecutor:
    name = "local"
    shares_grants = True

    def __init__(self, server_url: str, data_dir: Path, on_exit: ExitCallback) -> None:
        self.server_url = server_url
        self.data_dir = data_dir
        self.log_dir = data_dir / logs.LOGS
        self.on_exit = on_exit
        self.stopping = False
        self._launched: dict[tuple[str, str], subprocess.Popen | warm_start.WarmChild] = {}
        self._lock = threading.Lock()
        self._launching: set[tuple[str, str]] = set()  # asked to launch, no process yet (a warm start may wait)
        self._launch_done = threading.Condition(self._lock)
        # room for `python -m optimize.worker KIND JOB_ID --server URL --shared-with IDS` on a forked worker's
        # command line
        reserve = len(sys.executable) + len(server_url) + 160 + SHARED_ROOM
        self._warm = (warm_start.WarmStarter(self._environment(), self.log_dir / "warm-worker.log", reserve)
                      if warm_start.enabled() else None)

    def _environment(self) -> dict[str, str]:
        return worker_environment(self.data_dir)

    def launch(self, kind: str, job_id: str, grant: Grant) -> None:
        log_path = logs.log_path(self.log_dir, kind, job_id, grant.attempt)  # a log per attempt (jobs/logs.py)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**self._environment(), "OPTIMIZE_LEASE_TOKEN": grant.token,
               **device_environment(grant.devices, grant.profile_kind)}
        command = worker_command(kind, job_id, self.server_url)
        served = {job_id: grant.token} | {member.job_id: member.token for member in grant.shared_with}
        if grant.shared_with:
            env["OPTIMIZE_SHARED_LEASES"] = json.dumps({m.job_id: m.token for m in grant.shared_with})
            command += ["--shared-with", ",".join(member.job_id for member in grant.shared_with)]
            for member in grant.shared_with:
                _link_log(logs.log_path(self.log_dir, kind, member.job_id, member.attempt), log_path)
        with self._lock:
            self._launching.update((kind, job) for job in served)
        process = None
        try:
            process = self._warm.start(command, env, log_path) if self._warm and grant.profile_kind != "gpu" else None
            if process is None:
                with log_path.open("ab") as sink:  # its own session: a server killed by a signal does not take it
                    process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env,
                                               start_new_session=True)
        finally:
            with self._lock:
                for job in served:
                    self._launching.discard((kind, job))
                    if process is not None:
                        self._launched[(kind, job)] = process
                self._launch_done.notify_all()
        threading.Thread(target=self._watch_child, args=(kind, served, process, log_path),
                         daemon=True, name=f"watch-{job_id[:8]}").start()

    def alive(self, kind: str, job_id: str) -> bool:
        return bool(self._find(kind, job_id))

    def kill(self, kind: str, job_id: str, others_go_on: bool = False) -> bool:
        """SIGKILL every worker of the job and wait until they are gone; False if one outlived the wait. With
        `others_go_on` the job's worker serves other jobs that hold its device on: it is left to them."""
        if others_go_on:
            return True
        with self._lock:  # a launch under way ends first: there is a process to kill, or there will be none
            self._launch_done.wait_for(lambda: (kind, job_id) not in self._launching, KILL_WAIT_SECONDS * 12)
            child = self._launched.get((kind, job_id))
        if child is not None and child.poll() is None:
            child.kill()  # our own child is waited for through its Popen, which its watcher also waits on
            try:
                child.wait(KILL_WAIT_SECONDS)
            except subprocess.TimeoutExpired:
                return False
        found = [p for p in self._find(kind, job_id) if child is None or p.pid != child.pid]
        for process in found:
            try:
                process.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass
        _gone, alive = psutil.wait_procs(found, timeout=KILL_WAIT_SECONDS)
        if alive:
            log.error("the worker of %s %s outlived SIGKILL for %ss", kind, job_id, KILL_WAIT_SECONDS)
        return not alive

    def reattach(self, kind: str, job_id: str, token: str) -> None:
        for process in self._find(kind, job_id):
            threading.Thread(target=self._watch_adopted, args=(kind, job_id, token, process), daemon=True,
                             name=f"adopt-{job_id[:8]}").start()

    def online(self) -> None:
        return None  # one machine: every declared device is here

    def most_on_one_node(self) -> None:
        return None

    def nodes(self) -> None:
        return None

    def shutdown(self, keep: set[str]) -> None:
        self.stopping = True
        with self._lock:
            launched = list(self._launched.items())
        for (kind, _job), process in launched:
            if kind not in keep and process.poll() is None:
                process.terminate()
        if self._warm is not None:
            self._warm.close()

    # ---------------------------------------------------------------------------------------------------------

    def _find(self, kind: str, job_id: str) -> list[psutil.Process]:
        """Live worker processes of the job (zombies are ended), whoever started them."""
        found = []
        for process in psutil.process_iter(["cmdline", "status"]):
            cmdline = process.info.get("cmdline") or []
            if process.info.get("status") == psutil.STATUS_ZOMBIE or len(cmdline) < 5:
                continue
            if cmdline[1:4] == ["-m", "optimize.worker", kind] and job_id in served_jobs(cmdline[4:]):
                found.append(process)
        return found

    def _watch_child(self, kind: str, served: dict[str, str], process: subprocess.Popen | warm_start.WarmChild,
                     log_path: Path) -> None:
        code = process.wait()
        with self._lock:
            for job_id in served:
                if self._launched.get((kind, job_id)) is process:
                    del self._launched[(kind, job_id)]
        for job_id, token in served.items():  # a job whose lease ended already is not affected
            self._report(kind, job_id, token, exit_reason(code, log_path))

    def _watch_adopted(self, kind: str, job_id: str, token: str, process: psutil.Process) -> None:
        try:
            process.wait()
        except psutil.Error:
            pass
        self._report(kind, job_id, token, "its process ended")

    def _report(self, kind: str, job_id: str, token: str, reason: str) -> None:
        try:
            self.on_exit(kind, job_id, token, reason)
        except Exception:  # noqa: BLE001 - a watcher thread must never die silently
            log.exception("recording the end of worker %s failed", job_id)


def device_environment(devices: list[str], profile_kind: str) -> dict[str, str]:
    """A worker sees only its granted GPUs (none on a cpu slot); the allocator reserves close to what it
    allocates unless the deployment configures another setting."""
    visible = ",".join(device.rsplit(":", 1)[1] for device in devices) if profile_kind == "gpu" else ""
    return {"CUDA_VISIBLE_DEVICES": visible,
            "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")}


def worker_environment(data_dir: Path) -> dict[str, str]:
    """What every worker of this server runs with; a job's lease token and devices are added to it."""
    return {**with_worker_defaults(dict(os.environ)), "OPTIMIZE_SERVER_FILE": str(data_dir / "server.json"),
            "OPTIMIZE_WORKER_CACHE": str(data_dir / "worker-cache")}


def worker_command(kind: str, job_id: str, server_url: str) -> list[str]:
    """`python -m optimize.worker KIND JOB_ID --server URL`: how workers are started, and found again."""
    return [sys.executable, "-m", "optimize.worker", kind, job_id, "--server", server_url]


SHARED_ROOM = 40 * 8  # a shared process's `--shared-with` job ids


def served_jobs(arguments: list[str]) -> list[str]:
    """The jobs a worker's command line (after `-m optimize.worker KIND`) serves: its job and any it shares with."""
    jobs = arguments[:1]
    if "--shared-with" in arguments[:-1]:
        jobs += arguments[arguments.index("--shared-with") + 1].split(",")
    return jobs


def _link_log(link: Path, target: Path) -> None:
    """A job served by another's process reads that process's log as its own."""
    link.parent.mkdir(parents=True, exist_ok=True)
    link.unlink(missing_ok=True)
    link.symlink_to(target)


def exit_reason(code: int | None, log_path: Path) -> str:
    """Why a worker process ended, in the words its job's end reason carries."""
    if code is None:  # a forked worker whose warm worker died before it: its code is unknown
        return "its process ended"
    if code < 0:
        return f"its process was killed by signal {-code} ({signal.Signals(-code).name})"
    if code != 0:
        tail = _last_line(log_path)
        return f"the worker exited with status {code}" + (f": {tail}" if tail else "")
    return "the worker exited without reporting a result"


def _last_line(path: Path) -> str:
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:500] if lines else ""
