"""Every run's metrics forwarded to an MLflow tracking server (`akka server start --mlflow URI`,
`OPTIMIZE_MLFLOW_URI`), on a thread of the server that training never waits on.

The forwarder sweeps the store every `every` seconds (`OPTIMIZE_MLFLOW_SWEEP_SECONDS`, default 2) and sends what
MLflow does not have yet; it never sits in the path of a worker's report, so a slow or absent MLflow server cannot
slow training or fail a request. A failure is logged (once per run until it changes) and the run is tried again later,
waiting longer each time (up to a minute); nothing is raised out of the thread.

- **One MLflow run per Optimize run**, across pauses, resumes and attempts: found by its tag `optimize.run_id` (in
  the experiment `optimize/PROJECT`, created when missing) or created, with the run's start time, its resolved settings
  flattened as params (`config.hyperparams.optimizer.learningRate`, …), and tags naming the project, method, base
  model and, for a branch, its parent (`optimize.parent_run_id`, and MLflow's `mlflow.parentRunId`: the UI nests the
  branch under its parent).
- **Metrics with their step**, under TRL's names (`optimize.core.tracker_names`: `loss`, `learning_rate`,
  `eval_loss`, `rewards/<term>/mean`, …) and the time the worker logged them.
- **What was sent is recorded in the MLflow run itself**: the tags `optimize.sent.train` and
  `optimize.sent.validation` (`ATTEMPT:STEP`, the newest point sent) go in the same `log_batch` as the points, so a
  server started again (or a new one on the same store) carries on where the last one stopped, with no table of its
  own. Points are sent in the order (attempt, step): after a resume, the updates a later attempt trains again after
  its save are sent again (MLflow keeps both values at such a step; the newer one is the run's latest).
- **The end status** once the run has ended and its last points are sent: FINISHED (completed), FAILED, KILLED
  (cancelled), with the time it ended; until then the MLflow run is RUNNING, its tag `optimize.phase` saying where the
  run is (PAUSED, …).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import and_, or_, select

from optimize.core.tracker_names import mlflow_key, numeric_values
from optimize.store.tables import Run, RunMetric

log = logging.getLogger("optimize.trackers.mlflow")

STATUS = {"COMPLETED": "FINISHED", "FAILED": "FAILED", "CANCELLED": "KILLED"}  # Optimize's end -> MLflow's
ROWS_PER_SWEEP = 500  # metric rows of one run (and kind) read per sweep; the rest next time
BATCH_VALUES = 900  # metrics per log_batch (MLflow takes 1000 entities a call, tags included)
PARAMS_PER_BATCH = 100  # MLflow's limit
PARAM_VALUE_CHARS = 6000  # MLflow's limit on a param's value
MAX_BACKOFF = 60.0


@dataclass
class Forwarded:
    """What the MLflow run of one Optimize run has: its id, the newest point sent of each kind, whether it ended."""

    mlflow_id: str
    sent: dict[str, tuple[int, int]]  # kind -> (attempt, step)
    phase: str | None = None
    ended: bool = False


class MlflowForwarder:
    def __init__(self, store, uri: str, every: float | None = None) -> None:
        self.store = store
        self.uri = uri
        self.every = every if every is not None else float(os.environ.get("OPTIMIZE_MLFLOW_SWEEP_SECONDS", "2"))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="mlflow-forwarder", daemon=True)
        self._client: Any = None
        self._runs: dict[str, Forwarded] = {}
        self._experiments: dict[str, str] = {}
        self._retry: dict[str, tuple[float, float, str]] = {}  # run -> (next try, backoff, last error logged)

    def start(self) -> None:
        # MLflow's client retries a request 7 times by default, for minutes; the sweep tries again itself
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
        self._thread.start()
        log.info("forwarding run metrics to MLflow at %s", self.uri)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sweep()
            except Exception:  # noqa: BLE001 - the store busy, MLflow's client failing to load: try again later
                log.exception("the MLflow forwarder's sweep failed")
            self._stop.wait(self.every)

    @property
    def client(self) -> Any:
        if self._client is None:
            from mlflow.tracking import MlflowClient

            self._client = MlflowClient(tracking_uri=self.uri)
        return self._client

    def sweep(self) -> None:
        """One pass: every run not yet ended in MLflow, oldest first (a branch's parent before it)."""
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
            except Exception as error:  # noqa: BLE001 - MLflow down or refusing: this run waits, the others go on
                self._failed(run_id, error)  # at the next sweep: an MLflow that does not answer costs one call a sweep
                return
            else:
                self._retry.pop(run_id, None)

    def forward(self, run_id: str) -> None:
        """Send one run's new points (at most ROWS_PER_SWEEP of each kind), its phase and, once ended, its status.
        The store is read in short transactions; MLflow is called outside them."""
        state = self._runs.get(run_id) or self._attach(run_id)
        with self.store.transaction() as session:
            run = session.get(Run, run_id)
            phase, finished_at = run.phase, run.finished_at
            fetched = {kind: self._new_rows(session, run_id, kind, state.sent.get(kind, (0, -1)))
                       for kind in ("train", "validation")}
        for kind, rows in fetched.items():
            self._send(state, kind, rows)
        drained = all(len(rows) < ROWS_PER_SWEEP for rows in fetched.values())
        if phase != state.phase:
            self.client.set_tag(state.mlflow_id, "optimize.phase", phase)
            state.phase = phase
        if phase in STATUS and drained:
            self.client.set_terminated(state.mlflow_id, status=STATUS[phase],
                                       end_time=_ms(finished_at) if finished_at else None)
            state.ended = True

    def _new_rows(self, session, run_id: str, kind: str, after: tuple[int, int]) -> list[tuple[int, int, int, dict]]:
        """(attempt, step, logged at in ms, values) of the points after `after`, in the order (attempt, step)."""
        attempt, step = after
        rows = session.scalars(
            select(RunMetric).where(RunMetric.run_id == run_id, RunMetric.kind == kind,
                                    or_(RunMetric.attempt > attempt,
                                        and_(RunMetric.attempt == attempt, RunMetric.step > step)))
            .order_by(RunMetric.attempt, RunMetric.step).limit(ROWS_PER_SWEEP))
        return [(row.attempt, row.step, _ms(row.at), dict(row.values or {})) for row in rows]

    def _send(self, state: Forwarded, kind: str, rows: list[tuple[int, int, int, dict]]) -> None:
        """Points in batches, each carrying the tag that records its newest point: a batch is sent whole or not."""
        from mlflow.entities import Metric, RunTag

        batch: list[Any] = []
        for index, (attempt, step, at, values) in enumerate(rows):
            batch += [Metric(mlflow_key(kind, name), value, at, step)
                      for name, value in sorted(numeric_values(values).items())]
            if index == len(rows) - 1 or len(batch) >= BATCH_VALUES - 20:
                self.client.log_batch(state.mlflow_id, metrics=batch,
                                      tags=[RunTag(f"optimize.sent.{kind}", f"{attempt}:{step}")])
                state.sent[kind] = (attempt, step)
                batch = []

    def _attach(self, run_id: str) -> Forwarded:
        """The MLflow run of `run_id`: found by its tag, or created with its params (a branch's parent first)."""
        from mlflow.entities import ViewType

        with self.store.transaction() as session:
            run = session.get(Run, run_id)
            facts = {"project": run.project, "created": _ms(run.created_at), "parent": run.parent_run_id,
                     "name": f"{run.model_name}-{run.id[:12]}", "description": run.description,
                     "params": flatten(run.resolved or {}),
                     "tags": {"optimize.run_id": run.id, "optimize.project": run.project,
                              "optimize.method": run.method, "optimize.base_model": run.base_entry_id,
                              "optimize.model_name": run.model_name, "optimize.dataset": run.dataset_reference}}
        experiment = self._experiment(facts["project"])
        found = self.client.search_runs([experiment], filter_string=f"tags.`optimize.run_id` = '{run_id}'",
                                        run_view_type=ViewType.ALL, max_results=1)
        if found:
            tags = found[0].data.tags
            state = Forwarded(found[0].info.run_id, {kind: _mark(tags.get(f"optimize.sent.{kind}"))
                                                     for kind in ("train", "validation")},
                              phase=tags.get("optimize.phase"),
                              ended=found[0].info.status in ("FINISHED", "FAILED", "KILLED"))
            if tags.get("optimize.params") != "logged":
                self._log_params(state.mlflow_id, facts["params"])
        else:
            tags = facts["tags"]
            if facts["description"]:
                tags["mlflow.note.content"] = facts["description"]
            if facts["parent"]:
                tags["optimize.parent_run_id"] = facts["parent"]
                parent = self._runs.get(facts["parent"]) or self._attach(facts["parent"])
                tags["mlflow.parentRunId"] = parent.mlflow_id  # a branch is in its parent's project
            created = self.client.create_run(experiment, start_time=facts["created"], tags=tags,
                                             run_name=facts["name"])
            state = Forwarded(created.info.run_id, {})
            self._log_params(state.mlflow_id, facts["params"])
        self._runs[run_id] = state
        return state

    def _log_params(self, mlflow_id: str, pairs: list[tuple[str, str]]) -> None:
        from mlflow.entities import Param, RunTag

        params = [Param(key[:250], value[:PARAM_VALUE_CHARS]) for key, value in pairs]
        for start in range(0, len(params), PARAMS_PER_BATCH):
            self.client.log_batch(mlflow_id, params=params[start:start + PARAMS_PER_BATCH])
        self.client.log_batch(mlflow_id, tags=[RunTag("optimize.params", "logged")])

    def _experiment(self, project: str) -> str:
        name = f"optimize/{project}"
        if name not in self._experiments:
            found = self.client.get_experiment_by_name(name)
            if found is None:
                try:
                    self._experiments[name] = self.client.create_experiment(name, tags={"optimize.project": project})
                except Exception:  # noqa: BLE001 - created meanwhile (another server on the same MLflow)
                    found = self.client.get_experiment_by_name(name)
                    if found is None:
                        raise
            if found is not None:
                self._experiments[name] = found.experiment_id
        return self._experiments[name]

    def _failed(self, run_id: str, error: Exception) -> None:
        _, backoff, logged = self._retry.get(run_id, (0.0, self.every, ""))
        message = f"{type(error).__name__}: {error}"[:500]
        if message != logged:
            log.warning("forwarding run %s to MLflow at %s failed (tried again, waiting up to %.0fs): %s",
                        run_id[:12], self.uri, MAX_BACKOFF, message)
        backoff = min(backoff * 2, MAX_BACKOFF)
        self._retry[run_id] = (time.monotonic() + backoff, backoff, message)


def flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    """`{"a": {"b": 1}, "c": [1]}` as `[("a.b", "1"), ("c", "[1]")]`."""
    if isinstance(value, dict) and value:
        return [pair for key, inner in value.items() for pair in flatten(inner, f"{prefix}.{key}" if prefix else key)]
    if not prefix:
        return []
    return [(prefix, value if isinstance(value, str) else json.dumps(value, default=str))]


def _mark(tag: str | None) -> tuple[int, int]:
    try:
        attempt, step = (int(part) for part in (tag or "").split(":"))
    except ValueError:
        return (0, -1)
    return (attempt, step)


def _ms(moment: datetime) -> int:
    """Milliseconds since the epoch; SQLite gives back the store's UTC times without their zone."""
    return int((moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp() * 1000)
