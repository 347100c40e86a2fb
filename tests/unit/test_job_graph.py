"""The job graph's rules, on SQLite and PostgreSQL: an edge to a job that does not exist or one that closes a cycle is
refused; a job waits while an upstream runs, goes on once it completed (taking its outputs) or once it waited as
long as it may; an upstream that ended without completing ends the job naming the upstream and its phase (`fail`)
or lets it go on without the output (`proceed`); and the scheduler grants nothing to a job its edges hold."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest

from optimize.core.clock import utcnow
from optimize.deployment import Deployment
from optimize.jobs import graph, registry
from optimize.jobs.devices import DeviceProfile
from optimize.jobs.graph import Edge, GraphError, IfUpstreamFails
from optimize.jobs.scheduler import Scheduler
from optimize.store.tables import Analysis, Distillation, Project
from tests.conftest import migrated_store

_counter = itertools.count()


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request, tmp_path_factory):
    store = migrated_store(request.param, tmp_path_factory.mktemp("graph"))
    with store.transaction() as session:
        session.add(Project(name="p", archived=False, created_at=utcnow()))
    yield store
    store.dispose()


def analysis(store, phase: str = "pending", reason: str | None = None) -> str:
    n = f"{next(_counter):08d}"
    with store.transaction() as session:
        session.add(Analysis(id=f"an{n}", examples_digest=n, kind="chat", base_entry_id="b", base_commit="c",
                             optimize_version="v", dataset_reference="r", phase=phase, attempt=1, reason=reason,
                             created_at=utcnow()))
    return f"an{n}"


def distillation(store, phase: str = "RUNNING", **values) -> str:
    n = f"{next(_counter):08d}"
    with store.transaction() as session:
        session.add(Distillation(id=f"di{n}", project="p", teacher_reference="m", teacher={}, source_reference="r",
                                 source_digest="d", source_rows=1, target="n/t", settings={}, device_profile="cpu",
                                 phase=phase, attempt=1, progress={}, created_at=utcnow(), **values))
    return f"di{n}"


def set_phase(store, table, job_id: str, phase: str, **values) -> None:
    with store.transaction() as session:
        row = session.get(table, job_id)
        row.phase = phase
        for key, value in values.items():
            setattr(row, key, value)


def wait(store, kind: str, job_id: str, *edges: Edge) -> None:
    with store.transaction() as session:
        graph.add_edges(session, kind, job_id, edges)


def readiness(store, kind: str, job_id: str) -> graph.Readiness:
    with store.transaction() as session:
        return graph.readiness(session, kind, job_id)


# --- validation ----------------------------------------------------------------------------------------------


def test_declared_edges_that_wait_in_a_circle_are_refused_naming_the_cycle():
    a, b, c = ("analysis", "a" * 16), ("analysis", "b" * 16), ("analysis", "c" * 16)
    graph.validate(None, {a: [], b: [a], c: [a, b]})  # a diamond is no cycle
    with pytest.raises(GraphError, match=r"in a cycle: analysis aaaaaaaaaaaa → analysis cccccccccccc → analysis "
                                         r"bbbbbbbbbbbb → analysis aaaaaaaaaaaa"):
        graph.validate(None, {a: [c], b: [a], c: [b]})
    with pytest.raises(GraphError, match="cannot wait for itself"):
        graph.validate(None, {a: [a]})


def test_an_edge_to_a_job_that_does_not_exist_is_refused(store):
    with store.transaction() as session, pytest.raises(GraphError, match=r"cannot wait for analysis nosuchjob: no "
                                                                          "such job exists"):
        graph.add_edges(session, "run", "r1", [Edge("analysis", "nosuchjob")])
    with store.transaction() as session, pytest.raises(GraphError, match="no such job exists"):
        graph.add_edges(session, "run", "r1", [Edge("nosuchkind", "x")])
    with store.transaction() as session, pytest.raises(GraphError, match="endpoints never complete"):
        graph.validate(session, {("run", "r1"): [("endpoint", "e1")], ("endpoint", "e1"): []})
    assert readiness(store, "run", "r1") == graph.READY  # nothing was kept


def test_an_edge_closing_a_cycle_through_stored_edges_is_refused(store):
    first, second, third = analysis(store), analysis(store), analysis(store)
    wait(store, "analysis", second, Edge("analysis", first))
    wait(store, "analysis", third, Edge("analysis", second))
    with store.transaction() as session, pytest.raises(GraphError, match="in a cycle"):
        graph.add_edges(session, "analysis", first, [Edge("analysis", third)])
    assert readiness(store, "analysis", first) == graph.READY


def test_recording_the_same_edge_twice_keeps_one(store):
    upstream = analysis(store)
    wait(store, "run", "twice", Edge("analysis", upstream, "report"))
    wait(store, "run", "twice", Edge("analysis", upstream, "report"))
    with store.transaction() as session:
        assert len(graph.edges_into(session, "run", "twice")) == 1


# --- satisfaction and the rule for an upstream that did not complete --------------------------------------------


def test_a_job_waits_while_its_upstream_runs_and_goes_on_with_its_output_once_it_completed(store):
    upstream = distillation(store, "RUNNING")
    wait(store, "run", "after-distill", Edge("distillation", upstream, "dataset"))
    assert readiness(store, "run", "after-distill") == graph.Readiness(
        False, waiting=f"waiting for distillation {upstream[:12]} (running)")
    set_phase(store, Distillation, upstream, "ASSEMBLING")  # its rows are not registered yet
    assert readiness(store, "run", "after-distill").waiting == f"waiting for distillation {upstream[:12]} (assembling)"
    registered = {"reference": "n/t:v1", "digest": "sha256:" + "0" * 64, "rows": 3}
    set_phase(store, Distillation, upstream, "COMPLETED", registered=registered)
    assert readiness(store, "run", "after-distill") == graph.READY
    with store.transaction() as session:
        assert graph.taken(session, "run", "after-distill") == {"dataset": [registered]}


@pytest.mark.parametrize(("phase", "reason", "said"), [
    ("FAILED", "no answer was accepted", ", which it waits for, ended FAILED: no answer was accepted"),
    ("CANCELLED", None, ", which it waits for, ended CANCELLED"),
])
def test_an_upstream_that_failed_or_was_cancelled_ends_a_job_that_cannot_go_on_without_it(store, phase, reason,
                                                                                          said):
    upstream = distillation(store, phase, failure_reason=reason)
    job = f"after-{phase}"
    wait(store, "run", job, Edge("distillation", upstream, "dataset", IfUpstreamFails.FAIL))
    assert readiness(store, "run", job) == graph.Readiness(False, failed=f"distillation {upstream[:12]}{said}")
    with store.transaction() as session:
        assert graph.taken(session, "run", job) == {}


def test_a_failure_decides_over_another_upstream_still_running(store):
    running, failed = analysis(store), analysis(store, "failed", "the rows could not be read")
    wait(store, "run", "two", Edge("analysis", running), Edge("analysis", failed))
    assert readiness(store, "run", "two").failed == (f"analysis {failed[:12]}, which it waits for, ended failed: "
                                                     "the rows could not be read")


def test_a_proceed_edge_lets_the_job_go_on_without_an_upstream_that_failed(store):
    upstream = analysis(store, "failed", "out of memory")
    wait(store, "run", "unchecked", Edge("analysis", upstream, "report", IfUpstreamFails.PROCEED))
    assert readiness(store, "run", "unchecked") == graph.READY
    with store.transaction() as session:
        assert graph.taken(session, "run", "unchecked") == {}


def test_an_edge_stops_holding_the_job_once_it_waited_as_long_as_it_may(store):
    upstream = analysis(store, "running")
    wait(store, "run", "late", Edge("analysis", upstream, "report", IfUpstreamFails.PROCEED,
                                    waits_until=utcnow() - timedelta(seconds=1)))
    wait(store, "run", "early", Edge("analysis", upstream, "report", IfUpstreamFails.PROCEED,
                                     waits_until=utcnow() + timedelta(hours=1)))
    assert readiness(store, "run", "late") == graph.READY
    assert readiness(store, "run", "early").waiting == f"waiting for analysis {upstream[:12]} (running)"


def test_an_analysis_gives_its_report_once_done(store):
    upstream = analysis(store, "running")
    wait(store, "run", "reads-report", Edge("analysis", upstream, "report", IfUpstreamFails.PROCEED))
    set_phase(store, Analysis, upstream, "done", lengths_sha256="f" * 64)
    with store.transaction() as session:
        assert graph.taken(session, "run", "reads-report") == {
            "report": [{"analysisId": upstream, "lengthsSha256": "f" * 64}]}


# --- the scheduler ----------------------------------------------------------------------------------------------


@pytest.fixture
def scheduler(store, tmp_path):
    profiles = [DeviceProfile(name="cpu", kind="cpu", devices=1)]
    return Scheduler(Deployment(store, None, profiles, tmp_path, None))


def test_the_scheduler_grants_nothing_to_a_job_its_edges_hold_and_grants_it_once_they_are_satisfied(store,
                                                                                                    scheduler):
    upstream, job = distillation(store, "ASSEMBLING"), analysis(store, "pending")
    wait(store, "analysis", job, Edge("distillation", upstream, "dataset"))
    kind = registry.kind("analysis")
    assert scheduler._grant(kind, job) is None
    with store.transaction() as session:
        assert session.get(Analysis, job).phase == "pending"
    set_phase(store, Distillation, upstream, "COMPLETED", registered={"reference": "n/t:v1"})
    assert scheduler._grant(kind, job) is not None
    with store.transaction() as session:
        assert session.get(Analysis, job).phase == "running"


def test_the_scheduler_ends_a_job_whose_upstream_was_cancelled_with_the_rules_message(store, scheduler):
    upstream, job = distillation(store, "CANCELLED"), analysis(store, "pending")
    wait(store, "analysis", job, Edge("distillation", upstream, "dataset"))
    assert scheduler._grant(registry.kind("analysis"), job) is None
    with store.transaction() as session:
        row = session.get(Analysis, job)
        assert (row.phase, row.reason) == ("failed", f"distillation {upstream[:12]}, which it waits for, ended "
                                                     "CANCELLED")
