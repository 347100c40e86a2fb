"""The kernel's server steps (`jobs.server_steps`): every job waiting in its kind's step phase has its step started,
once at a time per job however often the scheduler asks, none for a job in another phase, and a step that failed
is started again when asked next (as after a restart: the job is still in that phase); a kind whose part of the
scheduler's tick fails holds no later kind back."""

from __future__ import annotations

import threading
import time
from enum import StrEnum
from types import SimpleNamespace

from optimize.jobs import server_steps
from optimize.jobs.server_steps import ServerStep
from optimize.store.tables import Analysis


class Phase(StrEnum):
    RUNNING = "running"
    DONE = "done"


def kind_with(step) -> SimpleNamespace:
    return SimpleNamespace(name="analysis", server_step=step,
                           lifecycle=SimpleNamespace(table=Analysis, column="phase"))


def settle(deadline: float = 10.0) -> None:
    """Until no step thread of this process runs."""
    end = time.monotonic() + deadline
    while server_steps._running and time.monotonic() < end:
        time.sleep(0.01)
    assert not server_steps._running


def test_each_waiting_job_has_its_step_once_at_a_time(deployment, add_analysis):
    add_analysis("a" * 32, "running")
    add_analysis("b" * 32, "running")
    add_analysis("c" * 32, "done")
    release = threading.Event()
    calls: list[str] = []

    def step(_deployment, job_id: str) -> None:
        calls.append(job_id)
        release.wait(10)

    kind = kind_with(ServerStep(Phase.RUNNING, step, "test-step"))
    for _ in range(3):  # the scheduler asks at every tick while the steps still run
        server_steps.start_waiting(deployment, kind)
    time.sleep(0.2)
    release.set()
    settle()
    assert sorted(calls) == ["a" * 32, "b" * 32]


def test_a_step_that_failed_is_started_again_at_the_next_tick(deployment, add_analysis, caplog):
    add_analysis("d" * 32, "running")
    calls: list[str] = []

    def step(_deployment, job_id: str) -> None:
        calls.append(job_id)
        if len(calls) == 1:
            raise RuntimeError("the store went away")

    kind = kind_with(ServerStep(Phase.RUNNING, step, "test-step"))
    server_steps.start_waiting(deployment, kind)
    settle()
    assert "test-step of analysis " + "d" * 32 + " failed; it is tried again" in caplog.text
    server_steps.start_waiting(deployment, kind)
    settle()
    assert calls == ["d" * 32, "d" * 32]


def test_a_kind_without_a_step_starts_nothing(deployment, add_analysis):
    add_analysis("e" * 32, "running")
    server_steps.start_waiting(deployment, kind_with(None))
    assert not server_steps._running


def test_a_kind_that_fails_its_tick_holds_no_later_kind_back(monkeypatch, caplog):
    """The scheduler's tick goes through every kind: one whose housekeeping raises is logged, and the kinds after
    it still have their housekeeping, their steps and their admission."""
    from optimize.jobs import registry, scheduler

    done: list[str] = []

    def broken(_deployment) -> None:
        raise RuntimeError("a row the kind cannot read")

    kinds = [SimpleNamespace(name="first", housekeeping=broken),
             SimpleNamespace(name="second", housekeeping=lambda _deployment: done.append("housekeeping"))]
    monkeypatch.setattr(registry, "kinds", lambda: kinds)
    monkeypatch.setattr(server_steps, "start_waiting", lambda _deployment, kind: done.append(f"steps {kind.name}"))
    tick = scheduler.Scheduler(SimpleNamespace(refresh_inventory=lambda: None))
    monkeypatch.setattr(tick, "reap", lambda: None)
    monkeypatch.setattr(tick, "admit", lambda kind: done.append(f"admit {kind.name}"))
    tick.tick()
    assert done == ["housekeeping", "steps second", "admit second"]
    assert "scheduler tick failed for first" in caplog.text
