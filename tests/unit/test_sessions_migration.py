"""Migration 0029 (sessions) on SQLite and PostgreSQL: after it the store holds what the tables declare for
`sessions`; it goes down to 0028 and up again."""

from __future__ import annotations

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from optimize.store.migrate import alembic_config
from optimize.store.tables import Base
from tests.conftest import migrated_store


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request, tmp_path):
    store = migrated_store(request.param, tmp_path)
    yield store
    store.dispose()


def test_the_migration_makes_what_the_table_declares_and_goes_down_and_up(store):
    with store.engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
        assert not [d for d in differences if "sessions" in repr(d) and "upload_sessions" not in repr(d)], \
            differences
        found = inspect(connection)
        assert {tuple(u["column_names"]) for u in found.get_unique_constraints("sessions")} == {
            ("project", "sha256")}
    command.downgrade(alembic_config(store.url), "0028")
    with store.engine.connect() as connection:
        assert "sessions" not in inspect(connection).get_table_names()
    command.upgrade(alembic_config(store.url), "head")
    with store.engine.connect() as connection:
        assert "sessions" in inspect(connection).get_table_names()
