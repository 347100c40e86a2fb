"""Server steps: the part of a job the server does itself once its worker has ended and its devices are released
(a distillation registering its accepted rows as a dataset version, in ASSEMBLING). A kind declares the phase its
jobs wait in for the step and the step (`JobKind.server_step`); at every tick the scheduler starts the step of each
job in that phase in a thread of its own (`start_waiting`) — one at a time per job in this process, so a long step
never holds the tick — and a step that fails, or a server that stops meanwhile, is taken up again at a later tick,
after a restart too, since the job is still in that phase. A step therefore decides its job's end itself and gives
the same result when it runs again (the same rows register the same version). A step may also leave its job in the
phase, to be run again at the next tick: a pipeline's step starts each stage once the one before it completed, and
waits in between.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sqlalchemy import select

from optimize.jobs.effects import queue_wake
from optimize.jobs.leases import reported
from optimize.jobs.lifecycle import transition
from optimize.schemas.outcomes import LastWord

log = logging.getLogger("optimize.jobs")


@dataclass(frozen=True)
class ServerStep:
    """The phase a kind's jobs wait in for the server's step, and the step: `run(deployment, job id)`."""

    phase: StrEnum
    run: Callable[[Any, str], None]
    name: str  # what the step does, in a word: its threads and log lines are named by it


_running: set[tuple[str, str]] = set()  # (kind, job id) whose step a thread of this process is running
_running_lock = threading.Lock()


def start_waiting(deployment: Any, kind: Any) -> None:
    """Start the kind's step for every job waiting in its phase that no thread of this process is running it for."""
    step: ServerStep | None = kind.server_step
    if step is None:
        return
    lifecycle = kind.lifecycle
    with deployment.store.transaction() as session:
        waiting = session.scalars(select(lifecycle.table.id).where(
            getattr(lifecycle.table, lifecycle.column) == step.phase.value)).all()
    for job_id in waiting:
        with _running_lock:
            if (kind.name, job_id) in _running:
                continue
            _running.add((kind.name, job_id))
        threading.Thread(target=_run_once, args=(deployment, kind.name, step, job_id), daemon=True,
                         name=f"{step.name}-{job_id[:8]}").start()


def _run_once(deployment: Any, kind: str, step: ServerStep, job_id: str) -> None:
    try:
        step.run(deployment, job_id)
    except Exception:  # noqa: BLE001 - a thread must not die silently; a later tick runs the step again
        log.exception("%s of %s %s failed; it is tried again", step.name, kind, job_id)
    finally:
        with _running_lock:
            _running.discard((kind, job_id))


def worker_ended(session: Any, lifecycle: Any, item: Any, token: str, body: Any, phase: StrEnum) -> dict[str, Any]:
    """A worker's last word on a job its server step finishes (read once its lease is known to hold): FAILED with
    the worker's reason, or the step's `phase` — its device released, the step takes it from there."""
    word = LastWord.read(body)
    if word.failed:
        reported(transition(session, lifecycle, item, lifecycle.phases["FAILED"], lease=token, by_worker=True,
                            failure_reason=word.failure_reason()), lifecycle, item.id)
    else:
        reported(transition(session, lifecycle, item, phase, lease=token, by_worker=True), lifecycle, item.id)
        queue_wake(session)
    return {"phase": item.phase}
