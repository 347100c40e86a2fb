"""What every tracker forwarder shares (`mlflow_forwarder`, `wandb_forwarder`): a thread of the server that sweeps the
store and sends each run's new metric points to a tracker, which training never waits on.

A sweep goes over every run not yet ended in the tracker, oldest first (a branch's parent before it). For each it
reads, in short store transactions, the run's phase and its metric points after the newest one sent (the cursor
`(attempt, step)` of each kind, train and validation; at most `ROWS_PER_SWEEP` of a kind per sweep, the rest next
time), and hands them to the tracker outside any transaction: `attach` (the tracker's run of an Optimize run, found
or created, with what it was sent), `send` (points, in the order (attempt, step), moving the cursor), `phase_changed`,
and `end` once the run has ended and its last points are sent. A failure is logged once per run until its message
changes, the sweep stops there (a tracker that does not answer costs one call a sweep) and that run is tried again
later, waiting twice as long each time up to a minute, while the next sweeps go on with the others. Nothing is raised
out of the thread; a tracker's calls all happen on it (`close` too, when the server stops).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import and_, or_, select

from optimize.core.clock import as_utc
from optimize.core.environment import setting
from optimize.store.tables import Run, RunMetric
from optimize.training.server.phases import TERMINAL

ENDED = frozenset(phase.value for phase in TERMINAL)  # a run's ends, as its phase column holds them
KINDS = ("train", "validation")
ROWS_PER_SWEEP = 500  # metric rows of one run (and kind) read per sweep; the rest next time
MAX_BACKOFF = 60.0
NOTHING_SENT = (0, -1)

# (attempt, step, logged at in ms since the epoch, values) of one metric point
Point = tuple[int, int, int, dict]


@dataclass
class Forwarded:
    """What the tracker's run of one Optimize run has: the tracker's handle on it (MLflow's run id, a W&B run), the
    newest point sent of each kind, the phase it was last told, whether it has ended there."""

    target: Any
    sent: dict[str, tuple[int, int]] = field(default_factory=dict)  # kind -> (attempt, step)
    phase: str | None = None
    ended: bool = False


@dataclass(frozen=True)
class RunFacts:
    """What a tracker's run is created with, read from the store."""

    id: str
    project: str
    name: str  # MODEL_NAME-RUN12
    description: str | None
    created: datetime
    parent: str | None
    root: str  # the first run of its line of branches (itself when it is no branch)
    resolved: dict
    labels: dict[str, str]  # run_id, project, method, base_model, model_name, dataset[, parent_run_id]


class Sweeper:
    """The sweep; a tracker's forwarder implements `attach`, `send`, `phase_changed`, `end` (and `close`)."""

    name = "tracker"  # the tracker's name: "the MLflow forwarder's sweep failed"
    stop_seconds = 10.0  # how long `stop` waits for the thread (and `close`)

    def __init__(self, store, tracker: str, every: float, log: logging.Logger, thread_name: str) -> None:
        self.store = store
        self.tracker = tracker  # where, in the log lines: "forwarding run … to MLflow at URI failed"
        self.every = every
        self.log = log
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=thread_name, daemon=True)
        self._runs: dict[str, Forwarded] = {}
        self._retry: dict[str, tuple[float, float, str]] = {}  # run -> (next try, backoff, last error logged)

    def start(self) -> None:
        self._thread.start()
        self.log.info("forwarding run metrics to %s", self.tracker)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.stop_seconds)

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    self.sweep()
                except Exception:  # noqa: BLE001 - the store busy, the tracker's client failing to load: again later
                    self.log.exception("the %s forwarder's sweep failed", self.name)
                self._stop.wait(self.every)
        finally:
            try:
                self.close()
            except Exception:  # noqa: BLE001 - the server stops either way
                self.log.exception("closing the %s forwarder failed", self.name)

    # -- the sweep -------------------------------------------------------------------------------------------------

    def sweep(self) -> None:
        """One pass: every run not yet ended in the tracker, oldest first (a branch's parent before it)."""
        with self.store.transaction() as session:
            runs = list(session.scalars(select(Run.id).order_by(Run.created_at)))
        now = time.monotonic()
        for run_id in runs:
            if self._stop.is_set():
                return
            known = self._runs.get(run_id)
            if (known and known.ended) or self._retry.get(run_id, (0.0,))[0] > now:
                continue
            try:
                self.forward(run_id)
            except Exception as error:  # noqa: BLE001 - the tracker down or refusing: this run waits, the others go on
                self._failed(run_id, error)  # at the next sweep: a tracker that does not answer costs one call a sweep
                return
            else:
                self._retry.pop(run_id, None)

    def forward(self, run_id: str) -> None:
        """Send one run's new points (at most ROWS_PER_SWEEP of each kind), its phase and, once ended, its end. The
        store is read in short transactions; the tracker is called outside them."""
        state = self.state_of(run_id)
        if state.ended:
            return
        with self.store.transaction() as session:
            run = session.get(Run, run_id)
            phase, finished_at = run.phase, run.finished_at
            fetched = {kind: new_points(session, run_id, kind, state.sent.get(kind, NOTHING_SENT)) for kind in KINDS}
        for kind, points in fetched.items():
            if points:
                self.send(state, kind, points)
        drained = all(len(points) < ROWS_PER_SWEEP for points in fetched.values())
        if phase != state.phase:
            self.phase_changed(state, phase)
            state.phase = phase
        if phase in ENDED and drained:
            self.end(state, phase, finished_at)
            state.ended = True

    def state_of(self, run_id: str) -> Forwarded:
        """The tracker's run of `run_id`, attached at its first sweep in this process (a branch's parent first)."""
        if run_id not in self._runs:
            self._runs[run_id] = self.attach(run_id)
        return self._runs[run_id]

    def facts(self, run_id: str) -> RunFacts:
        with self.store.transaction() as session:
            run = session.get(Run, run_id)
            root = run
            while root.parent_run_id and (parent := session.get(Run, root.parent_run_id)) is not None:
                root = parent
            labels = {"run_id": run.id, "project": run.project, "method": run.method,
                      "base_model": run.base_entry_id, "model_name": run.model_name,
                      "dataset": run.dataset_reference}
            if run.parent_run_id:
                labels["parent_run_id"] = run.parent_run_id
            return RunFacts(id=run.id, project=run.project, name=f"{run.model_name}-{run.id[:12]}",
                            description=run.description, created=run.created_at, parent=run.parent_run_id,
                            root=root.id, resolved=dict(run.resolved or {}), labels=labels)

    def _failed(self, run_id: str, error: Exception) -> None:
        _, backoff, logged = self._retry.get(run_id, (0.0, self.every, ""))
        message = f"{type(error).__name__}: {error}"[:500]
        if message != logged:
            self.log.warning("forwarding run %s to %s failed (tried again, waiting up to %.0fs): %s",
                             run_id[:12], self.tracker, MAX_BACKOFF, message)
        backoff = min(backoff * 2, MAX_BACKOFF)
        self._retry[run_id] = (time.monotonic() + backoff, backoff, message)
        self.failed(run_id)

    # -- what a tracker's forwarder implements ------------------------------------------------------------------------

    def attach(self, run_id: str) -> Forwarded:
        """The tracker's run of `run_id`, found (with what it was sent) or created."""
        raise NotImplementedError

    def send(self, state: Forwarded, kind: str, points: list[Point]) -> None:
        """Send points of one kind, in the order (attempt, step); `state.sent[kind]` says the newest one sent."""
        raise NotImplementedError

    def phase_changed(self, state: Forwarded, phase: str) -> None:
        raise NotImplementedError

    def end(self, state: Forwarded, phase: str, finished_at: datetime | None) -> None:
        """The run has ended (COMPLETED, FAILED, CANCELLED) and its last points are sent."""
        raise NotImplementedError

    def failed(self, run_id: str) -> None:
        """After a failure on `run_id` (logged, retried later): drop what may no longer be trusted."""

    def close(self) -> None:
        """The server stops: on the thread, after its last sweep."""


def new_points(session, run_id: str, kind: str, after: tuple[int, int]) -> list[Point]:
    """The points of one kind after `after`, in the order (attempt, step), at most ROWS_PER_SWEEP."""
    attempt, step = after
    rows = session.scalars(
        select(RunMetric).where(RunMetric.run_id == run_id, RunMetric.kind == kind,
                                or_(RunMetric.attempt > attempt,
                                    and_(RunMetric.attempt == attempt, RunMetric.step > step)))
        .order_by(RunMetric.attempt, RunMetric.step).limit(ROWS_PER_SWEEP))
    return [(row.attempt, row.step, epoch_ms(row.at), dict(row.values or {})) for row in rows]


def sweep_seconds(variable: str) -> float:
    """The seconds between sweeps, from `variable` (OPTIMIZE_MLFLOW_SWEEP_SECONDS, …); refused unless a number above
    0 (`akka server start` asks before it binds its port)."""
    return setting(variable)


def mark(point: tuple[int, int]) -> str:
    """`ATTEMPT:STEP`, what a tracker keeps of the newest point it was sent."""
    return f"{point[0]}:{point[1]}"


def parse_mark(text: str | None) -> tuple[int, int]:
    try:
        attempt, step = (int(part) for part in (text or "").split(":"))
    except ValueError:
        return NOTHING_SENT
    return (attempt, step)


def epoch_ms(moment: datetime) -> int:
    """Milliseconds since the epoch of a stored time."""
    return int(as_utc(moment).timestamp() * 1000)
