"""Every run's metrics forwarded to Weights & Biases (`akka server start --wandb offline|online`, `OPTIMIZE_WANDB`),
on a thread of the server that training never waits on (a `trackers.sweeper.Sweeper`, like the MLflow forwarder:
the sweep every 2 seconds, `OPTIMIZE_WANDB_SWEEP_SECONDS`; a failure logged once per run and tried again later).
`wandb` is imported on that thread only, at its first sweep.

- **One W&B run per Optimize run**, its id the Optimize run's id (32 hex), its name `MODEL_NAME-RUN12`, in the project
  `optimize-PROJECT` (`WANDB_PROJECT` puts every run in one project instead; the entity, API key and server are
  W&B's own `WANDB_ENTITY`, `WANDB_API_KEY`, `WANDB_BASE_URL`), its group the first 12 characters of the first run
  of its line of branches (a branch shows beside its parent), its job type the method, its notes the description,
  its config the resolved settings with `optimize: {run_id, project, method, base_model, model_name, dataset,
  parent_run_id}`.
- **Metrics** as Transformers' W&B callback logs them: TRL's names under `train/` and `eval/` (`train/loss`,
  `train/learning_rate`, `eval/loss`, `train/rewards/TERM/mean`, …: `optimize.core.tracker_names`), the update
  number as `train/global_step`, which every metric is charted against (`define_metric("*", step_metric=…)`), and
  the time the worker logged the point. W&B's own step just counts the points sent, so the updates a resumed
  attempt trains again are kept (W&B drops a point whose own step is not above the last).
- **Offline** (`DIR/wandb/offline-run-TIME-RUNID`, DIR being `--wandb-dir`, default the data dir): an offline run
  cannot be resumed, so there is one folder per Optimize run, written whole by one server process: the W&B run
  stays open while the server lives and is appended to; a server started again writes the run again from the store
  (which holds every point), after removing that run's earlier folders. `wandb sync DIR/wandb/offline-run-*` sends
  one whole W&B run per Optimize run.
- **Online**: `resume="allow"` on the run's id; what was sent is kept in the W&B run's summary
  (`optimize.sent.train`, `optimize.sent.validation`: `ATTEMPT:STEP`), read back by a server started again, which
  sends only what follows.
- **The end**: once the run has ended and its last points are sent, the summary's `optimize.phase` says how, and the
  W&B run is finished with exit code 0 (completed) or 1 (failed, cancelled); a file `DIR/wandb/optimize-ended/MODE/
  RUNID` then keeps a server started again from opening it once more. Open runs are finished (exit code 0, their
  `optimize.phase` saying where they were) when the server stops, and W&B's service process is stopped with them.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from datetime import datetime
from pathlib import Path
from typing import Any

from optimize.core.settings import wandb_where
from optimize.core.tracker_names import numeric_values, tensorboard_tag
from optimize.schemas.phases import RunPhase
from optimize.trackers.sweeper import KINDS, NOTHING_SENT, Forwarded, Point, Sweeper, mark, parse_mark, sweep_seconds

log = logging.getLogger("optimize.trackers.wandb")

MODES = ("offline", "online")
STEP_METRIC = "train/global_step"  # Transformers' W&B callback's: every metric is charted against the update
TAG_CHARS = 64  # W&B's limit on a tag


def project_name(project: str) -> str:
    """The W&B project of an Optimize project's runs: `WANDB_PROJECT`, else `optimize-PROJECT` (W&B's project names
    hold no `/ \\ # ? % :`)."""
    return os.environ.get("WANDB_PROJECT") or re.sub(r"[/\\#?%:]", "-", f"optimize-{project}")[:128]


class WandbForwarder(Sweeper):
    """`Forwarded.target` is the open `wandb.Run` (None once finished)."""

    name = "W&B"
    stop_seconds = 60.0  # finishing the open runs (online: sending what W&B's service still holds)

    def __init__(self, store, mode: str, root: Path, every: float | None = None) -> None:
        super().__init__(store, wandb_where(mode, root),
                         every if every is not None else sweep_seconds("OPTIMIZE_WANDB_SWEEP_SECONDS"),
                         log, "wandb-forwarder")
        self.mode = mode
        self.root = root  # W&B's `dir`: it writes in root/wandb
        self._wandb: Any = None

    @property
    def folder(self) -> Path:
        return self.root / "wandb"

    def ended_file(self, run_id: str) -> Path:
        return self.folder / "optimize-ended" / self.mode / run_id

    @property
    def wandb(self) -> Any:
        if self._wandb is None:
            os.environ.setdefault("WANDB_ERROR_REPORTING", "false")  # no crash reports sent to W&B from a server
            import wandb

            wandb.setup(settings=wandb.Settings(silent=True))  # W&B's own lines never on the server's terminal
            if self.mode == "online" and not wandb.login(prompt=False, verify=False):
                # never W&B's prompt on the server's terminal, nor its falling back to offline without one
                raise RuntimeError("W&B has no credentials: set WANDB_API_KEY (or run `wandb login` as the server's "
                                   "user), and WANDB_BASE_URL for a W&B server of your own")
            self._wandb = wandb
        return self._wandb

    def attach(self, run_id: str) -> Forwarded:
        """The W&B run of `run_id`, opened (online: resumed when it exists); offline, written again from the start."""
        ended = self._read_ended(run_id)
        if ended is not None:
            return ended
        facts = self.facts(run_id)
        wandb = self.wandb
        if self.mode == "offline":  # an offline run cannot be resumed: this server process writes it whole
            for earlier in self.folder.glob(f"offline-run-*-{run_id}*"):
                shutil.rmtree(earlier)
        self.root.mkdir(parents=True, exist_ok=True)
        labels = facts.labels
        run = wandb.init(
            id=run_id, name=facts.name, project=project_name(facts.project), group=facts.root[:12],
            job_type=labels["method"], notes=facts.description,
            tags=[tag[:TAG_CHARS] for tag in (labels["method"], labels["project"])],
            config={**facts.resolved, "optimize": labels}, dir=str(self.root), mode=self.mode,
            resume="allow" if self.mode == "online" else None, reinit="create_new",
            settings=wandb.Settings(console="off", save_code=False, disable_code=True, disable_git=True,
                                    disable_job_creation=True, x_disable_stats=True, x_disable_meta=True,
                                    x_disable_machine_info=True, x_save_requirements=False, silent=True))
        try:
            run.define_metric(STEP_METRIC)
            run.define_metric("*", step_metric=STEP_METRIC, step_sync=True)
            state = Forwarded(run)
            if self.mode == "online":  # what an earlier server process sent, kept in the run's summary
                summary = run.summary
                state.sent = {kind: parse_mark(summary.get(f"optimize.sent.{kind}")) for kind in KINDS}
                state.phase = summary.get("optimize.phase")
        except Exception:
            _finish(run, 1)
            raise
        return state

    def send(self, state: Forwarded, kind: str, points: list[Point]) -> None:
        """One `log` a point; the summary's `optimize.sent.KIND` says the newest one sent."""
        for attempt, step, at, values in points:
            data: dict[str, Any] = {tensorboard_tag(kind, name): value
                                    for name, value in numeric_values(values).items()}
            state.target.log({**data, STEP_METRIC: step, "_timestamp": at / 1000})
            state.sent[kind] = (attempt, step)
        state.target.summary[f"optimize.sent.{kind}"] = mark(state.sent[kind])

    def phase_changed(self, state: Forwarded, phase: str) -> None:
        state.target.summary["optimize.phase"] = phase

    def end(self, state: Forwarded, phase: str, finished_at: datetime | None) -> None:
        run_id = state.target.id
        state.target.summary["optimize.phase"] = phase
        state.target.finish(exit_code=0 if phase == RunPhase.COMPLETED else 1)
        state.target = None
        path = self.ended_file(run_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"runId": run_id, "phase": phase,
                                    "sent": {kind: mark(sent) for kind, sent in state.sent.items()}}))

    def failed(self, run_id: str) -> None:
        """Whatever went wrong, this run is opened again at its next try (offline: written again)."""
        state = self._runs.pop(run_id, None)
        if state is not None and state.target is not None:
            _finish(state.target, 1)

    def close(self) -> None:
        for state in self._runs.values():
            if state.target is not None:
                _finish(state.target, 0)
                state.target = None
        if self._wandb is not None:
            self._wandb.teardown()  # W&B's service process goes with the server

    def _read_ended(self, run_id: str) -> Forwarded | None:
        try:
            ended = json.loads(self.ended_file(run_id).read_text())
        except (OSError, ValueError):
            return None
        sent = {kind: parse_mark(ended.get("sent", {}).get(kind)) for kind in KINDS}
        return Forwarded(None, {kind: point for kind, point in sent.items() if point != NOTHING_SENT},
                         phase=ended.get("phase"), ended=True)


def _finish(run: Any, exit_code: int) -> None:
    try:
        run.finish(exit_code=exit_code)
    except Exception:  # noqa: BLE001 - a run W&B cannot finish is dropped either way
        log.exception("finishing W&B's run %s failed", getattr(run, "id", "?"))
