"""Apply the Alembic migrations shipped in `store/migrations` up to head."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from optimize.store.db import normalize_url

MIGRATIONS = Path(__file__).with_name("migrations")


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", normalize_url(url).replace("%", "%%"))
    return config


def upgrade(url: str) -> None:
    command.upgrade(alembic_config(url), "head")
