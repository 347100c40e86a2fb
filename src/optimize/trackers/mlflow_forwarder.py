"""Every run's metrics forwarded to an MLflow tracking server (`akka server start --mlflow URI`,
`OPTIMIZE_MLFLOW_URI`), on a thread of the server that training never waits on.

The forwarder (a `trackers.sweeper.Sweeper`) sweeps the store every `every` seconds (`OPTIMIZE_MLFLOW_SWEEP_SECONDS`,
default 2) and sends what MLflow does not have yet; it never sits in the path of a worker's report, so a slow or absent
MLflow server cannot slow training or fail a request. A failure is logged (once per run until it changes) and the run
is tried again later, waiting longer each time (up to a minute); nothing is raised out of the thread.

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
from datetime import datetime
from typing import Any

from optimize.core.tracker_names import mlflow_key, numeric_values
from optimize.trackers.sweeper import KINDS, Forwarded, Point, Sweeper, epoch_ms, mark, parse_mark, sweep_seconds

log = logging.getLogger("optimize.trackers.mlflow")

STATUS = {"COMPLETED": "FINISHED", "FAILED": "FAILED", "CANCELLED": "KILLED"}  # Optimize's end -> MLflow's
BATCH_VALUES = 900  # metrics per log_batch (MLflow takes 1000 entities a call, tags included)
PARAMS_PER_BATCH = 100  # MLflow's limit
PARAM_VALUE_CHARS = 6000  # MLflow's limit on a param's value


class MlflowForwarder(Sweeper):
    """`Forwarded.target` is the MLflow run's id."""

    name = "MLflow"

    def __init__(self, store, uri: str, every: float | None = None) -> None:
        super().__init__(store, f"MLflow at {uri}",
                         every if every is not None else sweep_seconds("OPTIMIZE_MLFLOW_SWEEP_SECONDS"),
                         log, "mlflow-forwarder")
        self.uri = uri
        self._client: Any = None
        self._experiments: dict[str, str] = {}

    def start(self) -> None:
        # MLflow's client retries a request 7 times by default, for minutes; the sweep tries again itself
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
        super().start()

    @property
    def client(self) -> Any:
        if self._client is None:
            from mlflow.tracking import MlflowClient

            self._client = MlflowClient(tracking_uri=self.uri)
        return self._client

    def send(self, state: Forwarded, kind: str, points: list[Point]) -> None:
        """Points in batches, each carrying the tag that records its newest point: a batch is sent whole or not."""
        from mlflow.entities import Metric, RunTag

        batch: list[Any] = []
        for index, (attempt, step, at, values) in enumerate(points):
            batch += [Metric(mlflow_key(kind, name), value, at, step)
                      for name, value in sorted(numeric_values(values).items())]
            if index == len(points) - 1 or len(batch) >= BATCH_VALUES - 20:
                self.client.log_batch(state.target, metrics=batch,
                                      tags=[RunTag(f"optimize.sent.{kind}", mark((attempt, step)))])
                state.sent[kind] = (attempt, step)
                batch = []

    def phase_changed(self, state: Forwarded, phase: str) -> None:
        self.client.set_tag(state.target, "optimize.phase", phase)

    def end(self, state: Forwarded, phase: str, finished_at: datetime | None) -> None:
        self.client.set_terminated(state.target, status=STATUS[phase],
                                   end_time=epoch_ms(finished_at) if finished_at else None)

    def attach(self, run_id: str) -> Forwarded:
        """The MLflow run of `run_id`: found by its tag, or created with its params (a branch's parent first)."""
        from mlflow.entities import ViewType

        facts = self.facts(run_id)
        params = flatten(facts.resolved)
        experiment = self._experiment(facts.project)
        found = self.client.search_runs([experiment], filter_string=f"tags.`optimize.run_id` = '{run_id}'",
                                        run_view_type=ViewType.ALL, max_results=1)
        if found:
            tags = found[0].data.tags
            state = Forwarded(found[0].info.run_id, {kind: parse_mark(tags.get(f"optimize.sent.{kind}"))
                                                     for kind in KINDS},
                              phase=tags.get("optimize.phase"),
                              ended=found[0].info.status in ("FINISHED", "FAILED", "KILLED"))
            if tags.get("optimize.params") != "logged":
                self._log_params(state.target, params)
        else:
            tags = {f"optimize.{key}": value for key, value in facts.labels.items()}
            if facts.description:
                tags["mlflow.note.content"] = facts.description
            if facts.parent:
                tags["mlflow.parentRunId"] = self.state_of(facts.parent).target  # a branch is in its parent's project
            created = self.client.create_run(experiment, start_time=epoch_ms(facts.created), tags=tags,
                                             run_name=facts.name)
            state = Forwarded(created.info.run_id, {})
            self._log_params(state.target, params)
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


def flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    """`{"a": {"b": 1}, "c": [1]}` as `[("a.b", "1"), ("c", "[1]")]`."""
    if isinstance(value, dict) and value:
        return [pair for key, inner in value.items() for pair in flatten(inner, f"{prefix}.{key}" if prefix else key)]
    if not prefix:
        return []
    return [(prefix, value if isinstance(value, str) else json.dumps(value, default=str))]
