"""Every lifecycle's transition table, walked pair by pair on SQLite and PostgreSQL: an allowed move wins once
(compare-and-set: a second move from the same read loses), records its event and, leaving an active phase, ends
the job's lease and releases its devices; a move the table does not allow is refused without a write."""

from __future__ import annotations

import itertools

import pytest
from sqlalchemy import select

from optimize.api.kinds import SERVED
from optimize.core.clock import utcnow
from optimize.evaluation.job import KIND as EVALUATION
from optimize.jobs import leases
from optimize.jobs.lifecycle import IllegalTransition, transition
from optimize.registry.upload_phases import UPLOAD
from optimize.store.tables import (
    Analysis,
    Comparison,
    Curation,
    DeviceHold,
    Distillation,
    Endpoint,
    Evaluation,
    Event,
    JobLease,
    Pipeline,
    Project,
    Run,
    RunAttempt,
    UploadSession,
)
from optimize.training.server.phases import ATTEMPT
from optimize.training.server.phases import RUN as RUN_LIFECYCLE
from tests.conftest import migrated_store

LIFECYCLES = [served.declaration.lifecycle for served in SERVED] + [ATTEMPT, UPLOAD]


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request, tmp_path_factory):
    store = migrated_store(request.param, tmp_path_factory.mktemp("lifecycles"))
    with store.transaction() as session:
        session.add(Project(name="p", archived=False, created_at=utcnow()))
    yield store
    store.dispose()


_counter = itertools.count()


def _row(session, lifecycle, phase: str):
    """A row of the lifecycle's table in `phase`, with the least its table requires."""
    n = f"{next(_counter):08d}"
    now = utcnow()
    table = lifecycle.table
    if table in (Run, RunAttempt):
        run = Run(id=f"run{n}", submission_id=n, submission_digest="d", project="p", method="sft",
                  phase=phase if table is Run else "TRAINING", attempt=1, plan={}, resolved={"execution": {}},
                  sources={}, config_hash="h", base_entry_id="b", base_commit="c", dataset_reference="r",
                  dataset_digest="d", dataset_rows=1, model_name="m", device_profile="cpu", device_count=1,
                  phase_times={}, created_at=now)
        session.add(run)
        if table is Run:
            return run
        session.flush()
        attempt = RunAttempt(run_id=run.id, number=1, lease_token=f"t{n}", devices=[], state=phase, started_at=now)
        session.add(attempt)
        return attempt
    if table is Analysis:
        row = Analysis(id=f"an{n}", examples_digest=n, kind="chat", base_entry_id="b", base_commit="c",
                       optimize_version="v", dataset_reference="r", phase=phase, attempt=1, created_at=now)
    elif table is Evaluation:
        row = Evaluation(id=f"ev{n}", project="p", model_reference="m", model={}, dataset_reference="r",
                         dataset_digest="d", dataset_rows=1, grader="g", device_profile="cpu", phase=phase,
                         attempt=1, progress={}, created_at=now)
    elif table is Distillation:
        row = Distillation(id=f"di{n}", project="p", teacher_reference="m", teacher={}, source_reference="r",
                           source_digest="d", source_rows=1, target="n/t", settings={}, device_profile="cpu",
                           phase=phase, attempt=1, progress={}, created_at=now)
    elif table is Curation:
        row = Curation(id=f"cu{n}", key=n, request_digest="d", project="p", sessions=[], candidates=1,
                       judge_reference="m", judge={}, instructions="keep", threshold=0.5, dataset="n/t",
                       device_profile="cpu", phase=phase, attempt=1, progress={}, created_at=now)
    elif table is Endpoint:
        row = Endpoint(id=f"ep{n}", project="p", model_reference="m", base={}, adapters=[], device_profile="cpu",
                       phase=phase, attempt=1, created_at=now)
    elif table is Comparison:
        row = Comparison(id=f"cm{n}", project="p", source_snapshot_id="s", entries=[], dataset_reference="r",
                         dataset_digest="d", dataset_rows=1, grader="g", max_new_tokens=4, device_profile="cpu",
                         margin=0.0, phase=phase, created_at=now)
    elif table is Pipeline:
        row = Pipeline(id=f"pl{n}", submission_id=n, project="p", plan={}, stages=[], phase=phase, created_at=now)
    else:
        row = UploadSession(id=f"up{n}", content_key=n, namespace="n", name="d", format="chat-jsonl-v1", digest="d",
                            manifest=[], phase=phase, created_at=now, expires_at=now)
    session.add(row)
    return row


def _pairs():
    for lifecycle in LIFECYCLES:
        for source, target in itertools.product(lifecycle.phases, repeat=2):
            yield pytest.param(lifecycle, source, target, id=f"{lifecycle.table.__tablename__}:{source}->{target}")


@pytest.mark.parametrize(("lifecycle", "source", "target"), list(_pairs()))
def test_every_pair_of_every_table(store, lifecycle, source, target):
    with store.transaction() as session:
        row = _row(session, lifecycle, source.value)
        session.flush()
        job_id = getattr(row, lifecycle.subject_key)
        held = source in lifecycle.active and lifecycle.table is not UploadSession
        if held:  # a worker holds it: a lease and a device
            leases.grant(session, lifecycle.kind, job_id, 1, [f"cpu:{job_id}"], 60)
    with store.transaction() as session:
        row = session.get(lifecycle.table, _key(row))
        if not lifecycle.allows(source, target):
            with pytest.raises(IllegalTransition):
                transition(session, lifecycle, row, target)
            assert getattr(row, lifecycle.column) == source.value
            return
        assert transition(session, lifecycle, row, target) is True
        assert getattr(row, lifecycle.column) == target.value
    with store.transaction() as session:
        events = session.scalars(select(Event).where(Event.subject == lifecycle.subject(job_id))).all()
        assert [e.data["phase"] for e in events if e.kind == lifecycle.event] == [target.value]
        if held and target not in lifecycle.active:
            assert leases.open_lease(session, lifecycle.kind, job_id) is None
            assert session.scalar(select(DeviceHold).where(DeviceHold.subject == lifecycle.subject(job_id))) is None
    with store.transaction() as session:  # the read it was moved from is stale now: a second move loses
        stale_row = session.get(lifecycle.table, _key(row))
        session.expunge(stale_row)  # as it was read before the move
        setattr(stale_row, lifecycle.column, source.value)
        assert transition(session, lifecycle, stale_row, target) is False


def _key(row):
    if isinstance(row, RunAttempt):
        return (row.run_id, row.number)
    return row.id


def test_a_move_under_a_lease_loses_once_the_lease_has_ended(store):
    kind = EVALUATION
    with store.transaction() as session:
        row = _row(session, kind.lifecycle, "RUNNING")
        session.flush()
        lease = leases.grant(session, "evaluation", row.id, 1, ["cpu:lease-test"], 60)
        token = lease.token
    with store.transaction() as session:
        leases.end(session, session.get(JobLease, token), "worker lost: test")
    with store.transaction() as session:
        row = session.get(Evaluation, row.id)
        assert transition(session, kind.lifecycle, row, kind.lifecycle.phases.COMPLETED, lease=token) is False
        assert row.phase == "RUNNING"


def test_a_device_held_by_jobs_granted_together_stays_held_until_the_last_lease_ends(store):
    """Runs sharing one base each hold a lease on the device; the hold passes from one ending lease to another
    still open, and only the last one's end frees the device."""
    device = f"cpu:shared-{utcnow().timestamp()}"
    with store.transaction() as session:
        rows = [_row(session, RUN_LIFECYCLE, "TRAINING") for _ in range(2)]
        session.flush()
        first = leases.grant(session, "run", rows[0].id, 1, [device], 60)
        second = leases.grant(session, "run", rows[1].id, 1, [device], 60, hold=False)
        assert first.token != second.token
        ids = [row.id for row in rows]
    with store.transaction() as session:
        assert session.get(DeviceHold, device).subject == f"run:{ids[0]}"
        assert leases.end_all(session, "run", ids[0], "cancelled") is True  # its worker goes on for the other
    with store.transaction() as session:
        assert session.get(DeviceHold, device).subject == f"run:{ids[1]}"  # still held, by the one training on
        assert leases.end_all(session, "run", ids[1], "completed") is False
    with store.transaction() as session:
        assert session.get(DeviceHold, device) is None
