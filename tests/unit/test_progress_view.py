"""The live progress of `wait` / `--wait` (optimize.cli.progress): the figures a follower derives from the
statuses a server streams — step of total, loss, tokens/s, an ETA that names its basis — and the three ways they
are shown: the Rich view on a terminal, a plain line, a JSON event. Statuses here have the shape the API answers
(`GET /v1/training/runs/{id}`, `…/evaluations/{id}`, `…/analyses/{id}`), their `count` made by the server's table
(`schemas.progress`); the integration tests follow real ones."""

from __future__ import annotations

import io
import json
import re

from rich.console import Console

from optimize.cli import progress
from optimize.cli.progress import Pace, Tracker, duration, event, line, view
from optimize.schemas.progress import count_of


def run_status(step: int, total: int = 40, trained_ms: int | None = None, phase: str = "TRAINING", loss=1.25,
               tokens: int | None = None, attempt: int = 1, prediction: dict | None = None) -> dict:
    progress_ = {"observedStep": step, "totalSteps": total, "loss": loss}
    if tokens is not None:
        progress_["tokens"] = tokens
    millis = {"QUEUED": 1000, "PREPARING": 2000}
    if trained_ms is not None:
        millis["TRAINING"] = trained_ms
    return {"runId": "ab" * 16, "phase": phase, "attempt": attempt, "progress": progress_,
            "count": count_of("run", phase, progress_), "timing": {"phaseMillis": millis}, "prediction": prediction}


def counted(item: str, status: dict) -> dict:
    """A status with its count, as the server answers it."""
    return {**status, "count": count_of(item, status["phase"], status.get("progress"))}


def terminal_text(renderable) -> str:
    buffer = io.StringIO()
    Console(file=buffer, force_terminal=True, width=120, color_system=None).print(renderable)
    return buffer.getvalue()


def test_eta_and_tokens_per_second_come_from_the_steps_seen_and_say_so():
    tracker = Tracker("runs")
    tracker.read(run_status(10, trained_ms=10_000, tokens=1000), now=0.0)
    reading = tracker.read(run_status(20, trained_ms=20_000, tokens=3000), now=1.0)
    # 10 steps in the 10 s of training between the two statuses: 20 steps left take 20 s; 2000 tokens in them
    assert reading.eta_seconds == 20.0 and reading.eta_basis == "from the last 10 steps"
    assert reading.tokens_per_second == 200.0
    assert (reading.done, reading.total, reading.unit, reading.loss) == (20, 40, "steps", 1.25)


def test_the_pace_is_kept_over_the_last_20_steps():
    pace = Pace()
    for step in range(0, 60):
        # slow at first (10 s a step), then fast (1 s a step) from step 30
        pace.add(step * 10.0 if step <= 30 else 300.0 + (step - 30), step)
    assert pace.counted() <= 21 and pace.per_second() == 1.0


def test_the_eta_is_measuring_until_two_updates_are_seen():
    # a late follower: the server's training clock starts with the run's first report, which may already hold
    # several steps, so a pace from the start is no measure (it read 30 steps in a blink and showed ETA 0s)
    tracker = Tracker("runs")
    first = tracker.read(run_status(30, trained_ms=200), now=5.0)
    assert first.eta_seconds is None and first.eta_status == "measuring"
    assert line("abababababab Training", first) == \
        "abababababab Training  steps 30/40 (75%)  loss 1.2500  ETA measuring"
    assert first.as_json()["etaSeconds"] is None and first.as_json()["etaStatus"] == "measuring"
    second = tracker.read(run_status(32, trained_ms=20_200), now=25.0)
    assert second.eta_seconds == 80.0 and second.eta_status == "measured"  # 2 steps in 20 s: 8 left take 80 s
    # the start (step 0) is no update: one update seen after it is still measuring
    tracker = Tracker("runs")
    tracker.read(run_status(0, trained_ms=10), now=0.0)
    assert tracker.read(run_status(1, trained_ms=9_000), now=9.0).eta_status == "measuring"
    assert tracker.read(run_status(2, trained_ms=10_000), now=10.0).eta_seconds == 38.0
    # evaluations, analyses and distillations alike: measuring until two counts are seen, nothing once done
    evaluation = Tracker("evaluations")
    status = {"evaluationId": "e" * 32, "phase": "RUNNING", "progress": {"answered": 3, "total": 10}}
    assert evaluation.read(counted("evaluation", status), now=0.0).eta_status == "measuring"
    ended = evaluation.read(counted("evaluation", {**status, "phase": "COMPLETED",
                                                   "progress": {"answered": 10, "total": 10}}), now=1.0)
    assert ended.eta_status is None and ended.eta_seconds is None


def test_before_training_the_eta_is_the_pre_flight_estimate_held_while_it_waits():
    estimate = {"seconds": 300.0, "basis": "4900 tokens/s per device measured by …"}
    queued = Tracker("runs").read(run_status(0, phase="QUEUED", prediction=estimate), now=0.0)
    assert queued.eta_seconds == 300.0 and queued.eta_basis == "from the pre-flight estimate"
    assert queued.eta_status == "estimated"
    # no training time passes while it is queued: the ETA holds instead of counting down to 0s
    assert queued.eta_now(120.0) == 300.0
    # once it trains, the ETA is measured: the estimate may be far off on a loaded machine
    started = Tracker("runs").read(run_status(0, trained_ms=60_000, prediction=estimate), now=0.0)
    assert started.eta_seconds is None and started.eta_status == "measuring"
    done = Tracker("runs").read(run_status(40, trained_ms=9_000, phase="COMPLETED", prediction=estimate), now=0.0)
    assert done.eta_seconds is None


def test_a_run_that_starts_over_measures_afresh():
    tracker = Tracker("runs")
    tracker.read(run_status(10, trained_ms=10_000, tokens=500), now=0.0)
    tracker.read(run_status(12, trained_ms=12_000, tokens=700), now=1.0)
    # a resumed attempt restores an earlier step, and its token count starts over
    reading = tracker.read(run_status(6, trained_ms=13_000, tokens=50, attempt=2), now=2.0)
    assert reading.eta_seconds is None and reading.tokens_per_second is None


def test_preparing_counts_rows_and_evaluations_count_answers():
    preparing = {"runId": "c" * 32, "phase": "PREPARING", "progress": {"rowsDone": 3, "rowsTotal": 12},
                 "timing": {"phaseMillis": {}}}
    reading = Tracker("runs").read(counted("run", preparing), now=0.0)
    assert (reading.done, reading.total, reading.unit) == (3, 12, "rows prepared")

    tracker = Tracker("evaluations")
    tracker.read(counted("evaluation", {"evaluationId": "e" * 32, "phase": "RUNNING",
                                        "progress": {"answered": 2, "total": 10}}), now=0.0)
    answers = tracker.read(counted("evaluation", {"evaluationId": "e" * 32, "phase": "RUNNING",
                                                  "progress": {"answered": 6, "total": 10}}), now=2.0)
    assert answers.eta_seconds == 2.0 and answers.eta_basis == "from the last 4 answers"
    assert "answers 6/10 (60%)" in line("eeeeeeeeeeee Running", answers)


def test_an_analysis_counts_the_rows_it_measured():
    tracker = Tracker("analyses")
    tracker.read(counted("analysis", {"analysisId": "a" * 32, "phase": "running",
                                      "progress": {"rowsMeasured": 256, "rowsTotal": 1024}}), now=0.0)
    reading = tracker.read(counted("analysis", {"analysisId": "a" * 32, "phase": "running",
                                                "progress": {"rowsMeasured": 512, "rowsTotal": 1024}}), now=1.0)
    assert line("aaaaaaaaaaaa running", reading) == \
        "aaaaaaaaaaaa running  rows measured 512/1024 (50%)  ETA 2s from the last 256 rows"


def test_the_plain_line_names_every_figure():
    tracker = Tracker("runs")
    tracker.read(run_status(10, trained_ms=10_000, tokens=1000), now=0.0)
    reading = tracker.read(run_status(20, trained_ms=20_000, tokens=3000), now=1.0)
    assert line("abababababab Training", reading) == (
        "abababababab Training  steps 20/40 (50%)  loss 1.2500  200 tokens/s  ETA 20s from the last 10 steps")


def test_a_json_event_is_the_status_with_its_name_and_figures():
    reading = Tracker("runs").read(run_status(0, phase="QUEUED", prediction={"seconds": 90, "basis": "b"}), now=0.0)
    status = run_status(0, phase="QUEUED", prediction={"seconds": 90, "basis": "b"})
    body = json.loads(json.dumps(event(status, reading)))
    assert body["event"] == "status" and body["item"] == "run" and body["runId"] == status["runId"]
    assert body["progress"] == status["progress"]  # the status as the API answers it, unchanged
    assert body["live"] == {"done": 0, "total": 40, "unit": "steps", "loss": 1.25, "tokensPerSecond": None,
                            "etaSeconds": 90.0, "etaBasis": "from the pre-flight estimate",
                            "etaStatus": "estimated"}


def test_the_terminal_view_draws_a_bar_and_the_figures():
    tracker = Tracker("runs")
    tracker.read(run_status(10, trained_ms=10_000, tokens=1000), now=0.0)
    reading = tracker.read(run_status(20, trained_ms=20_000, tokens=3000), now=1.0)
    text = terminal_text(view("abababababab Training", reading, now=6.0))
    lines = text.splitlines()
    assert lines[0] == "abababababab Training"
    assert "━" in lines[1] and "20/40 steps (50%)" in lines[1]
    # the ETA counts down between statuses: 5 s after this one, 15 s are left
    assert lines[2] == "loss 1.2500 · 200 tokens/s · ETA 15s from the last 10 steps"


def test_the_terminal_view_of_an_item_without_a_count_is_its_headline():
    reading = Tracker("endpoints").read({"endpointId": "f" * 32, "phase": "STARTING", "models": []}, now=0.0)
    assert terminal_text(view("ffffffffffff Starting  answering 0/1 model(s)", reading, now=0.0)).splitlines() == \
        ["ffffffffffff Starting  answering 0/1 model(s)"]


def test_durations_are_as_exact_as_an_estimate_deserves():
    assert [duration(s) for s in (0.4, 41, 180, 200, 1500, 7500)] == ["0s", "41s", "3m", "3m20s", "25m", "2h05m"]
    assert progress.WINDOW == 20


def test_the_live_view_redraws_in_place_and_leaves_the_screen_to_the_final_view():
    from optimize.cli.follow import _LiveView

    buffer = io.StringIO()
    live = _LiveView("runs", lambda s: f"{s['runId'][:12]} {s['phase'].title()}",
                     Console(file=buffer, force_terminal=True, width=100, color_system=None))
    with live:
        live.show(run_status(5, trained_ms=5_000, tokens=500))
        live.show(run_status(10, trained_ms=10_000, tokens=1000))
    drawn = buffer.getvalue()
    assert "abababababab Training" in drawn and "10/40 steps (25%)" in drawn
    assert "ETA measuring" in drawn  # one update seen: no pace yet
    assert re.search(r"ETA (30|29)s from the last 5 steps", drawn)  # counting down from 30 s as it is drawn
    assert drawn.endswith("\x1b[2K")  # transient: the view is erased, and `get`'s view is printed after it


def test_one_table_counts_every_followed_kind_that_counts():
    from optimize.schemas.progress import COUNTED

    # the followers read what the server's table counts; an endpoint counts nothing (its headline says its models)
    assert {followed.item for followed in progress.FOLLOWED.values()} - set(COUNTED) == {"endpoint"}
    assert count_of("endpoint", "READY", {}) is None
    assert count_of("run", "QUEUED", {}) is None  # nothing counted yet: no count, not a zero of nothing
    assert count_of("run", "TRAINING", {"observedStep": 3, "totalSteps": 8}) == {
        "done": 3, "total": 8, "unit": "steps"}
