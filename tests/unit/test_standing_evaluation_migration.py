"""Migration 0027 (a project's standing evaluation) on SQLite and PostgreSQL: after it the store holds what the tables
declare for the projects' standing columns and `standing_evaluations`; it goes down to 0026 and up again."""

from __future__ import annotations

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from optimize.store.migrate import alembic_config
from optimize.store.tables import Base
from tests.conftest import migrated_store

STANDING_COLUMNS = {"standing_dataset", "standing_grader", "standing_grader_instructions", "standing_set_at"}


def ours(difference) -> bool:
    """Whether an autogenerate difference touches what 0027 adds."""
    text = repr(difference)
    return "standing_evaluations" in text or any(column in text for column in STANDING_COLUMNS)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request, tmp_path):
    store = migrated_store(request.param, tmp_path)
    yield store
    store.dispose()


def test_the_migration_makes_what_the_tables_declare_and_goes_down_and_up(store):
    with store.engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
        assert not [d for d in differences if ours(d)], differences
        found = inspect(connection)
        assert STANDING_COLUMNS <= {c["name"] for c in found.get_columns("projects")}
        assert {tuple(u["column_names"]) for u in found.get_unique_constraints("standing_evaluations")} == {
            ("model_version_id", "dataset", "grader")}

    url = store.url
    command.downgrade(alembic_config(url), "0026")
    with store.engine.connect() as connection:
        found = inspect(connection)
        assert "standing_evaluations" not in found.get_table_names()
        assert not STANDING_COLUMNS & {c["name"] for c in found.get_columns("projects")}
    command.upgrade(alembic_config(url), "head")
    with store.engine.connect() as connection:
        assert "standing_evaluations" in inspect(connection).get_table_names()
