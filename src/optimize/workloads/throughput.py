"""This deployment's own measure of its estimates: the time estimates (`workloads.estimates`, from the catalog's
measured tokens/s) scaled by how fast runs of the same shape actually trained here.

A run's **shape** (`Shape`, the one definition) is its base model, method, device profile and devices, its
`maxSeqLength` and the sequences an update takes (batch size × gradient accumulation × devices, × generations for a
reinforcement run). Two shapes are the same when the first four are equal and the last two are within a factor of
`SIMILAR` of each other: a run at 256 tokens and 4 sequences an update speaks for one at 512 and 8, not for one at
4096 and 64.

The **scale factor** of one completed run is its measured throughput over the predicted one: the seconds a step
its pre-flight estimate predicted (unscaled) over the seconds a step it trained (its TRAINING time over the steps
it observed). Only runs that completed in one attempt count: a resumed attempt trains some steps twice. The factor
of an estimate is the median over the last `RECENT` such runs of its shape (newest first by when they finished),
so one run slowed by a passing load does not swing it. With no such run the estimate is left as the catalog gives
it. A factor of 0.07 says runs of this shape here train at 7% of the catalog's measured throughput (a loaded or
smaller machine): the estimate's seconds are divided by it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select

from optimize.core.clock import as_utc, utcnow
from optimize.schemas.phases import RunPhase
from optimize.schemas.plans import REINFORCEMENT, RlHyperparams, RunPlan, parse_plan
from optimize.store.tables import Run

RECENT = 5  # the factor is the median over the last this many runs of the shape
SIMILAR = 2.0  # maxSeqLength and sequences an update within this factor of each other are the same shape
LOOKED_AT = 200  # completed runs of the same model, method and devices read, newest first


@dataclass(frozen=True)
class Shape:
    """What a run's throughput depends on, as far as an estimate is concerned."""

    base_model: str  # the catalog entry id
    method: str
    device_profile: str
    devices: int
    max_seq_length: int
    sequences_per_update: int

    def same_as(self, other: Shape) -> bool:
        return ((self.base_model, self.method, self.device_profile, self.devices)
                == (other.base_model, other.method, other.device_profile, other.devices)
                and _near(self.max_seq_length, other.max_seq_length)
                and _near(self.sequences_per_update, other.sequences_per_update))


def _near(a: int, b: int) -> bool:
    return a > 0 and b > 0 and max(a, b) <= SIMILAR * min(a, b)


def shape_of(plan: RunPlan, base_model: str) -> Shape:
    """The shape of a plan whose base model resolves to the catalog entry `base_model` (devices as the estimate
    counts them: the cpu profile is one slot)."""
    reinforcement = plan.config.method in REINFORCEMENT
    rl = plan.config.rl_hyperparams or RlHyperparams()
    loop = rl.training if reinforcement else plan.config.hyperparams.training
    devices = 1 if plan.execution.device_profile == "cpu" else max(plan.execution.gpus, 1)
    sequences = loop.batch_size * loop.gradient_accumulation * devices * (rl.generations if reinforcement else 1)
    return Shape(base_model, plan.config.method, plan.execution.device_profile, devices, plan.config.max_seq_length,
                 sequences)


def training_seconds(phase_times: dict[str, Any] | None, now: datetime | None = None) -> float:
    """The seconds a run spent in TRAINING, over all its spans (one still open counts to now)."""
    now = now or utcnow()
    total = 0.0
    for start, end in (phase_times or {}).get("TRAINING", []):
        finish = datetime.fromisoformat(end) if end else now
        total += (as_utc(finish) - as_utc(datetime.fromisoformat(start))).total_seconds()
    return total


def run_factor(run: Run) -> float | None:
    """One completed run's measured throughput over its predicted one; None where it cannot say (no estimate, a
    resumed attempt, no step or no time measured)."""
    prediction = run.prediction or {}
    predicted = prediction.get("unscaledSeconds", prediction.get("seconds"))
    steps = prediction.get("steps")
    observed = (run.progress or {}).get("observedStep")
    if run.attempt != 1 or not predicted or not steps or not observed:
        return None
    trained = training_seconds(run.phase_times)
    if trained <= 0:
        return None
    return (predicted / steps) / (trained / observed)


@dataclass(frozen=True)
class Scale:
    factor: float
    runs: list[str]  # the runs it was measured on, newest first
    device_profile: str

    def words(self) -> str:
        runs = "run" if len(self.runs) == 1 else f"{len(self.runs)} runs"
        return f"scaled by {self.factor:.2g} from the last {runs} of this shape on {self.device_profile}"

    def as_json(self) -> dict[str, Any]:
        return {"factor": round(self.factor, 4), "runs": self.runs, "basis": self.words()}


def measured_scale(session, shape: Shape) -> Scale | None:
    """The factor from the last RECENT completed runs of `shape` on this deployment; None when there is none."""
    runs = session.scalars(select(Run).where(
        Run.phase == RunPhase.COMPLETED.value, Run.base_entry_id == shape.base_model, Run.method == shape.method,
        Run.device_profile == shape.device_profile).order_by(Run.finished_at.desc()).limit(LOOKED_AT)).all()
    found: list[tuple[str, float]] = []
    for run in runs:
        try:
            same = shape_of(parse_plan(run.plan), run.base_entry_id).same_as(shape)
        except Exception:  # noqa: BLE001 - a plan stored under an older schema says nothing about this shape
            same = False
        factor = run_factor(run) if same else None
        if factor is not None:
            found.append((run.id, factor))
        if len(found) == RECENT:
            break
    if not found:
        return None
    return Scale(statistics.median(f for _, f in found), [run_id for run_id, _ in found], shape.device_profile)


def scaled(figures: dict[str, Any], scale: Scale | None) -> dict[str, Any]:
    """An estimate's answer with its seconds scaled (`unscaledSeconds` keeps the catalog's figure, `scale` says by
    what and from which runs); with no factor or no time estimate its seconds as they were, and `scale` null."""
    unscaled = figures.get("seconds")
    if scale is None or unscaled is None:
        return {**figures, "unscaledSeconds": unscaled, "scale": None}
    return {**figures, "seconds": round(unscaled / scale.factor, 1), "unscaledSeconds": unscaled,
            "scale": scale.as_json()}


def estimate_scaled(session, figures: dict[str, Any], plan: RunPlan, base_model: str) -> dict[str, Any]:
    """`figures` (a `workloads.estimates.estimate` answer) scaled by this deployment's runs of the plan's shape."""
    if figures.get("seconds") is None:
        return scaled(figures, None)
    return scaled(figures, measured_scale(session, shape_of(plan, base_model)))
