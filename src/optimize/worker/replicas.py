"""The processes a worker holding several devices starts, one per further device: a distillation's teacher
replicas, a run's training ranks. Each is `python -m optimize.worker KIND JOB_ID --server URL --replica N` (the
executor finds and stops it with the worker, by that command line), sees only what its device needs, reads its
work as one JSON line on its stdin, ends with the worker that started it, and exits 0 when its work is done.

A replica that fails abandons the attempt (`frame.Abandoned`): the worker exits non-zero and the kernel treats it
as a lost worker, so the next attempt goes on from what was saved.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from optimize.worker.channel import Channel
from optimize.worker.frame import Abandoned


class Replicas:
    def __init__(self, channel: Channel, count: int, environment: Callable[[int], dict[str, str]]) -> None:
        """Start replicas 1..count-1 now (they load what they need while this worker goes on); `environment(n)`
        is what replica n runs with beyond this process's own."""
        kind, job_id = channel.base.rstrip("/").split("/")[-2:]
        self.processes: list[subprocess.Popen] = []
        for index in range(1, count):
            self.processes.append(subprocess.Popen(
                [sys.executable, "-m", "optimize.worker", kind, job_id, "--server", channel.base_url, "--replica",
                 str(index)], stdin=subprocess.PIPE, env={**os.environ, **environment(index)}, text=True))

    def hand_out(self, works: list[Any]) -> None:
        """Replica n's work is `works[n - 1]`."""
        for process, work in zip(self.processes, works, strict=True):
            process.stdin.write(json.dumps(work) + "\n")
            process.stdin.close()

    def failed(self) -> str | None:
        """Why the attempt cannot go on, when a replica ended with a failure."""
        for index, process in enumerate(self.processes, start=1):
            if process.poll() not in (None, 0):
                return f"replica {index} exited with status {process.returncode}"
        return None

    def wait(self, lost: threading.Event) -> None:
        """Until every replica has done its work (or this worker's lease is lost); raises Abandoned for one that
        failed."""
        for process in self.processes:
            while process.poll() is None and not lost.is_set():
                time.sleep(0.2)
            why = self.failed()
            if why:
                raise Abandoned(f"{why}; the attempt is abandoned and the next goes on from what was saved")

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait()


def received() -> Any | None:
    """A replica's work from its worker (None: there is none; the worker gave up or the smoke failed)."""
    line = sys.stdin.readline()
    return json.loads(line) if line.strip() else None


def end_with_parent() -> None:
    """A replica must not outlive the worker that started it (a killed worker's replicas stop with it)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def share_cores(count: int) -> None:
    """On the cpu, each of `count` processes on one node takes its part of the cores (they would otherwise fight
    over them)."""
    if count > 1:
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // count))
