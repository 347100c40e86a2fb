"""The store's conflict-ignoring insert reports what it inserted, on SQLite and PostgreSQL alike (callers decide
on it whether they created a row, e.g. whether to launch an analysis)."""

from __future__ import annotations

import pytest

from optimize.core.clock import utcnow
from optimize.store.db import insert_ignoring_conflict
from optimize.store.tables import Project
from tests.conftest import migrated_store


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request, tmp_path):
    store = migrated_store(request.param, tmp_path)
    yield store
    store.dispose()


def test_insert_ignoring_conflict_counts_the_rows_it_inserted(store):
    values = {"name": "p", "archived": False, "created_at": utcnow()}
    with store.transaction() as session:
        assert insert_ignoring_conflict(session, Project, values, ["name"]) == 1
        assert insert_ignoring_conflict(session, Project, {**values, "description": "x"}, ["name"]) == 0
    with store.transaction() as session:
        assert session.get(Project, "p").description is None  # the first row stands
