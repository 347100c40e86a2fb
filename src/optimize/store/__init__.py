"""The SQL store: tables, engine and sessions (SQLite WAL or PostgreSQL), Alembic migrations."""
