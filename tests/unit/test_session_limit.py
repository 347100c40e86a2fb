"""A session's file is bounded by OPTIMIZE_SESSION_MAX_BYTES, in the sessions service that holds the limit: a file
under it becomes a session; a declared size over it is refused before a byte is read; a body that declares no size
is counted as it arrives and refused once it passes the limit. A refusal names the limit, is the API's 413, and
keeps nothing (no session, nothing left in the blob store's staging). The route hands the service the body's
declared size and its chunks (tests/integration/test_sessions_cli.py sends files through it)."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import func, select

from optimize.blobs.local import LocalBlobStore
from optimize.core.clock import utcnow
from optimize.core.errors import TooLarge
from optimize.deployment import Deployment
from optimize.sessions.service import open_session
from optimize.store.tables import ConversationSession, Project
from tests.conftest import migrated_store
from tests.session_files import canonical_records, jsonl, oasst_slice

LIMIT = 2000


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A migrated SQLite store, shared by the module's tests (each works in a project of its own)."""
    store = migrated_store("sqlite", tmp_path_factory.mktemp("session-limit"))
    yield store
    store.dispose()


@pytest.fixture
def deployment(store, tmp_path, monkeypatch) -> Deployment:
    """A deployment on the module's store with a blob store of the test's own, sessions limited to 2,000 bytes."""
    monkeypatch.setenv("OPTIMIZE_SESSION_MAX_BYTES", str(LIMIT))
    return Deployment(store, None, [], tmp_path, LocalBlobStore(tmp_path / "blobs"))


@pytest.fixture
def project(deployment) -> str:
    name = f"bounded{uuid.uuid4().hex[:8]}"
    with deployment.store.transaction() as session:
        session.add(Project(name=name, archived=False, created_at=utcnow()))
    return name


def kept(deployment: Deployment, project: str) -> tuple[int, list]:
    """How many sessions the project holds, and what the blob store's staging still holds."""
    with deployment.store.transaction() as session:
        sessions = session.scalar(select(func.count()).select_from(ConversationSession).where(
            ConversationSession.project == project))
    return sessions, list(deployment.blobs.staging.iterdir())


def test_a_file_under_the_limit_becomes_a_session(deployment, project):
    data = jsonl(canonical_records())
    assert len(data) <= LIMIT
    receiver = open_session(deployment, "canonical", project, len(data))
    receiver.feed(data)
    created = receiver.finish()
    assert created.created and created.bytes > 0 and created.project == project
    assert kept(deployment, project) == (1, [])


def test_a_declared_size_over_the_limit_is_refused_before_a_byte_is_read(deployment, project):
    too_big = jsonl(oasst_slice()) * 3
    assert len(too_big) > LIMIT
    with pytest.raises(TooLarge) as refused:
        open_session(deployment, "oasst1", project, len(too_big))
    assert f"holds {len(too_big):,} bytes" in refused.value.message and "2,000" in refused.value.message
    assert refused.value.status == 413 and "OPTIMIZE_SESSION_MAX_BYTES" in refused.value.hint
    assert kept(deployment, project) == (0, [])


def test_a_body_of_no_declared_size_is_counted_as_it_arrives_and_nothing_is_kept(deployment, project):
    too_big = jsonl(oasst_slice()) * 3
    receiver = open_session(deployment, "oasst1", project, None)
    first, rest = too_big[:LIMIT], too_big[LIMIT:]
    receiver.feed(first)  # up to the limit: taken
    with pytest.raises(TooLarge) as refused:
        receiver.feed(rest)
    assert "2,000" in refused.value.message and refused.value.status == 413
    assert kept(deployment, project) == (0, [])
