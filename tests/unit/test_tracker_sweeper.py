"""The sweep every tracker forwarder shares (`optimize.trackers.sweeper`), on a real store: points in the order
(attempt, step) after the cursor, a step trained again by a later attempt sent again, a run's end only once its last
points are sent, a branch's parent first, and a failing run logged once, tried again later and not holding up the
runs after it at the next sweeps. The tracker here is a forwarder that records what it is handed."""

from __future__ import annotations

import itertools
import logging
import time
from datetime import timedelta

import pytest

import optimize.trackers.sweeper as sweeper
from optimize.core.clock import utcnow
from optimize.store.tables import Project, Run, RunMetric
from optimize.trackers.sweeper import Forwarded, Sweeper
from tests.conftest import migrated_store

_counter = itertools.count()
START = utcnow()


class Recording(Sweeper):
    """A forwarder whose tracker is a list: what `attach`, `send`, `phase_changed` and `end` were handed."""

    name = "Recorder"

    def __init__(self, store) -> None:
        super().__init__(store, "the recorder", 0.01, logging.getLogger("tests.recorder"), "recorder")
        self.calls: list[tuple] = []
        self.refuse: dict[str, str] = {}  # run id -> the error its attach raises
        self.closed = False

    def attach(self, run_id: str) -> Forwarded:
        if run_id in self.refuse:
            raise ConnectionError(self.refuse[run_id])
        facts = self.facts(run_id)
        if facts.parent:
            self.state_of(facts.parent)
        self.calls.append(("attach", run_id, facts.root, facts.labels.get("parent_run_id")))
        return Forwarded(run_id)

    def send(self, state, kind, points) -> None:
        self.calls.append(("send", state.target, kind, [(attempt, step) for attempt, step, _, _ in points]))
        state.sent[kind] = points[-1][:2]

    def phase_changed(self, state, phase) -> None:
        self.calls.append(("phase", state.target, phase))

    def end(self, state, phase, finished_at) -> None:
        self.calls.append(("end", state.target, phase))

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def store(tmp_path):
    store = migrated_store("sqlite", tmp_path)
    with store.transaction() as session:
        session.add(Project(name="p", archived=False, created_at=utcnow()))
    yield store
    store.dispose()


def add_run(store, phase: str = "TRAINING", parent: str | None = None) -> str:
    n = next(_counter)
    run_id = f"{n:032x}"
    with store.transaction() as session:
        session.add(Run(id=run_id, submission_id=str(n), submission_digest="d", project="p", method="sft", phase=phase,
                        attempt=1, plan={}, resolved={"execution": {}}, sources={}, config_hash="h", base_entry_id="b",
                        base_commit="c", dataset_reference="r", dataset_digest="d", dataset_rows=1, model_name="m",
                        device_profile="cpu", device_count=1, phase_times={}, parent_run_id=parent,
                        created_at=START + timedelta(seconds=n)))
    return run_id


def put(store, run_id: str, kind: str, attempt: int, *steps: int) -> None:
    """Points as a worker's reports leave them: one row a step, a later attempt's replacing an earlier one's."""
    with store.transaction() as session:
        for step in steps:
            row = session.get(RunMetric, (run_id, kind, step))
            if row is None:
                session.add(RunMetric(run_id=run_id, kind=kind, step=step, attempt=attempt, values={"loss": 1.0},
                                      at=utcnow()))
            else:
                row.attempt, row.values = attempt, {"loss": 2.0}


def set_phase(store, run_id: str, phase: str) -> None:
    with store.transaction() as session:
        session.get(Run, run_id).phase = phase


def test_points_go_in_attempt_step_order_after_the_cursor_and_the_end_after_the_last(store, monkeypatch):
    monkeypatch.setattr(sweeper, "ROWS_PER_SWEEP", 3)
    forwarder = Recording(store)
    run = add_run(store)
    put(store, run, "train", 1, 1, 2, 3, 4)
    put(store, run, "validation", 1, 2)
    forwarder.sweep()
    assert forwarder.calls == [("attach", run, run, None), ("send", run, "train", [(1, 1), (1, 2), (1, 3)]),
                               ("send", run, "validation", [(1, 2)]), ("phase", run, "TRAINING")]
    forwarder.calls.clear()
    put(store, run, "train", 2, 3, 4, 5)  # a resumed attempt trains 3 and 4 again
    set_phase(store, run, "COMPLETED")
    forwarder.sweep()  # three points of four: not drained, so not ended yet
    assert forwarder.calls == [("send", run, "train", [(2, 3), (2, 4), (2, 5)]), ("phase", run, "COMPLETED")]
    forwarder.calls.clear()
    forwarder.sweep()
    assert forwarder.calls == [("end", run, "COMPLETED")]
    forwarder.calls.clear()
    forwarder.sweep()  # ended: nothing more
    assert forwarder.calls == []


def test_a_branchs_parent_is_attached_first_and_its_root_named(store):
    forwarder = Recording(store)
    root = add_run(store, "COMPLETED")
    branch = add_run(store, parent=root)
    twig = add_run(store, parent=branch)
    forwarder.state_of(twig)
    assert [call for call in forwarder.calls if call[0] == "attach"] == [
        ("attach", root, root, None), ("attach", branch, root, root), ("attach", twig, root, branch)]


def test_a_failing_run_is_logged_once_tried_later_and_does_not_hold_up_the_others(store, caplog, monkeypatch):
    forwarder = Recording(store)
    failing, other = add_run(store), add_run(store)
    forwarder.refuse[failing] = "nobody answers"
    clock = [1000.0]
    monkeypatch.setattr(sweeper.time, "monotonic", lambda: clock[0])
    with caplog.at_level(logging.WARNING, logger="tests.recorder"):
        forwarder.sweep()  # stops at the failing run: one call a sweep while the tracker does not answer
        assert forwarder.calls == []
        forwarder.sweep()  # within its wait: skipped, and the next run goes on
        assert ("attach", other, other, None) in forwarder.calls
        clock[0] += 61
        forwarder.sweep()  # tried again, failing the same way: not logged again
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == [f"forwarding run {failing[:12]} to the recorder failed (tried again, waiting up to 60s): "
                        "ConnectionError: nobody answers"]
    assert forwarder._retry[failing][1] == pytest.approx(0.04)  # 0.01, doubled at each failure
    del forwarder.refuse[failing]
    clock[0] += 61
    forwarder.sweep()
    assert ("attach", failing, failing, None) in forwarder.calls and failing not in forwarder._retry


def test_the_thread_closes_the_forwarder_when_it_stops(store):
    forwarder = Recording(store)
    run = add_run(store)
    forwarder.start()
    deadline = time.monotonic() + 10
    while not forwarder.calls and time.monotonic() < deadline:
        time.sleep(0.01)
    assert forwarder.calls[0] == ("attach", run, run, None) and not forwarder.closed
    forwarder.stop()
    assert not forwarder._thread.is_alive() and forwarder.closed
