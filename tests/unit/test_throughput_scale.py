"""Estimates scaled by this deployment's own runs (`optimize.workloads.throughput`): a run's shape and when two are
the same, one completed run's factor (measured over predicted throughput), the median of the last runs of a shape
read from the store, and an estimate's answer scaled — or left as it was with no run of its shape."""

from __future__ import annotations

from datetime import timedelta

import pytest

from optimize.core.clock import iso, utcnow
from optimize.schemas.plans import parse_plan
from optimize.store.tables import Project, Run
from optimize.workloads.throughput import (
    Scale,
    Shape,
    estimate_scaled,
    measured_scale,
    run_factor,
    scaled,
    shape_of,
)
from tests.conftest import migrated_store

MODEL = "optimize/tiny-llama-3.2"


def document(max_seq_length: int = 256, batch: int = 4, method: str = "sft", profile: str = "cpu") -> dict:
    return {"kind": "run", "project": "p", "baseModel": MODEL,
            "config": {"method": method, "dataset": "p/chat", "maxSeqLength": max_seq_length,
                       "hyperparams": {"training": {"maxSteps": 16, "batchSize": batch}}},
            "execution": {"deviceProfile": profile}}


def test_a_shape_is_model_method_devices_and_length_and_batch_within_a_factor_of_two():
    shape = shape_of(parse_plan(document()), MODEL)
    assert shape == Shape(MODEL, "sft", "cpu", 1, 256, 4)
    assert shape.same_as(shape_of(parse_plan(document(max_seq_length=512, batch=8)), MODEL))
    assert not shape.same_as(shape_of(parse_plan(document(max_seq_length=1024)), MODEL))
    assert not shape.same_as(shape_of(parse_plan(document(batch=16)), MODEL))
    assert not shape.same_as(shape_of(parse_plan(document(method="dpo")), MODEL))
    assert not shape.same_as(shape_of(parse_plan(document()), "optimize/other"))


def run(number: int, *, trained_s: float = 40.0, predicted_s: float = 4.0, steps: int = 16, attempt: int = 1,
        phase: str = "COMPLETED", plan: dict | None = None, unscaled: float | None = None) -> Run:
    """A run that trained `steps` of its predicted `steps` in `trained_s` seconds of TRAINING."""
    finished = utcnow() - timedelta(minutes=100 - number)
    start = finished - timedelta(seconds=trained_s)
    prediction = {"seconds": predicted_s, "steps": steps, "basis": "catalog"}
    if unscaled is not None:
        prediction["unscaledSeconds"] = unscaled
    return Run(id=f"{number:032d}", submission_id=f"s{number}", submission_digest="0" * 64, project="p", method="sft",
               phase=phase, attempt=attempt, plan=plan or document(), resolved={}, sources={}, config_hash="0" * 64,
               base_entry_id=MODEL, base_commit="c" * 40, dataset_reference="p/chat:v1",
               dataset_digest="sha256:" + "0" * 64, dataset_rows=10, model_name="m", device_profile="cpu",
               device_count=1, progress={"observedStep": steps}, cost={}, results={},
               phase_times={"TRAINING": [[iso(start), iso(finished)]]}, created_at=start, finished_at=finished,
               prediction=prediction)


def test_a_run_s_factor_is_its_measured_over_its_predicted_throughput():
    assert run_factor(run(1, trained_s=40.0, predicted_s=4.0)) == pytest.approx(0.1)
    # a figure it was scaled by itself is no measure: its estimate before scaling is
    assert run_factor(run(2, trained_s=40.0, predicted_s=40.0, unscaled=4.0)) == pytest.approx(0.1)
    assert run_factor(run(3, attempt=2)) is None  # a resumed attempt trains some steps twice
    assert run_factor(run(4, predicted_s=0.0)) is None


@pytest.fixture
def session(tmp_path):
    store = migrated_store("sqlite", tmp_path)
    with store.transaction() as session:
        session.add(Project(name="p", created_at=utcnow()))
        session.flush()
        yield session
    store.dispose()


def test_the_factor_is_the_median_of_the_last_five_completed_runs_of_the_shape(session):
    shape = shape_of(parse_plan(document()), MODEL)
    assert measured_scale(session, shape) is None  # none yet: the estimate stays as the catalog gives it
    # oldest first: a slow old run, then five whose factors are 0.1, 0.2, 0.05, 0.1, 0.4
    for number, trained in enumerate([400.0, 40.0, 20.0, 80.0, 40.0, 10.0], start=1):
        session.add(run(number, trained_s=trained))
    session.add(run(7, trained_s=1.0, attempt=2))  # resumed: left out
    session.add(run(8, trained_s=1.0, phase="FAILED"))  # not completed: left out
    session.add(run(9, trained_s=1.0, plan=document(max_seq_length=2048)))  # another shape: left out
    session.flush()
    scale = measured_scale(session, shape)
    assert scale.factor == pytest.approx(0.1) and scale.runs == [f"{n:032d}" for n in (6, 5, 4, 3, 2)]
    assert scale.words() == "scaled by 0.1 from the last 5 runs of this shape on cpu"
    figures = {"steps": 16, "seconds": 12.0, "basis": "4900 tokens/s per device measured by …"}
    answer = estimate_scaled(session, figures, parse_plan(document()), MODEL)
    assert answer["seconds"] == 120.0 and answer["unscaledSeconds"] == 12.0 and answer["basis"] == figures["basis"]
    assert answer["scale"]["factor"] == 0.1 and len(answer["scale"]["runs"]) == 5
    # another model has no runs: unscaled
    other = estimate_scaled(session, figures, parse_plan({**document(), "baseModel": "x"}), "x")
    assert other == {**figures, "unscaledSeconds": 12.0, "scale": None}


def test_an_estimate_without_a_time_or_a_factor_keeps_its_figures():
    figures = {"steps": 6, "seconds": None, "basis": "no throughput is measured …"}
    assert scaled(figures, Scale(0.5, ["r"], "cpu")) == {**figures, "unscaledSeconds": None, "scale": None}
    one = scaled({"seconds": 10.0}, Scale(0.068, ["r"], "cpu"))
    assert one["seconds"] == 147.1
    assert one["scale"]["basis"] == "scaled by 0.068 from the last run of this shape on cpu"


def test_runs_get_shows_the_scaled_estimate_and_where_its_factor_came_from():
    from optimize.cli.commands.runs import _prediction_line

    prediction = {"seconds": 176.0, "steps": 16, "basis": "4900 tokens/s per device measured by b on h (d)",
                  "unscaledSeconds": 12.0, "actualSeconds": 170.0,
                  "scale": Scale(0.068, ["r"] * 3, "cpu").as_json()}
    assert _prediction_line(prediction, True) == (
        "training 2m56s for 16 steps (4900 tokens/s per device measured by b on h (d); scaled by 0.068 from the last "
        "3 runs of this shape on cpu, 12s unscaled); actual 2m50s (0.97× the estimate)")
    unscaled = {**prediction, "seconds": 12.0, "scale": None}  # no run of its shape: as it always read
    assert _prediction_line(unscaled, False) == \
        "training 12s for 16 steps (4900 tokens/s per device measured by b on h (d)); actual 2m50s so far"
