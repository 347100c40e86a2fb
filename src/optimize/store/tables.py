"""Tables of the registry and the event log, declared once for SQLite and PostgreSQL alike.

Uniqueness (one version number per dataset, one digest per dataset, one upload session per content) is
enforced by constraints, never by check-then-write.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

UtcDateTime = DateTime(timezone=True)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Namespace(Base):
    __tablename__ = "namespaces"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    description: Mapped[str | None] = mapped_column(Text)
    archived: Mapped[bool] = mapped_column(Boolean, default=False)
    archived_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)


class Dataset(Base):
    __tablename__ = "datasets"
    __table_args__ = (UniqueConstraint("namespace", "name", name="uq_datasets_namespace_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    namespace: Mapped[str] = mapped_column(ForeignKey("namespaces.name"), index=True)
    name: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)


class DatasetVersion(Base):
    __tablename__ = "dataset_versions"
    __table_args__ = (
        UniqueConstraint("dataset_id", "version", name="uq_dataset_versions_dataset_version"),
        UniqueConstraint("dataset_id", "digest", name="uq_dataset_versions_dataset_digest"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id"), index=True)
    version: Mapped[int] = mapped_column(Integer)
    digest: Mapped[str] = mapped_column(String(71))
    format: Mapped[str] = mapped_column(String(32))
    rows: Mapped[int] = mapped_column(BigInteger)
    tool_rows: Mapped[int] = mapped_column(BigInteger)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    object_count: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)


class DatasetObject(Base):
    """One object (shard) of a version, in order."""

    __tablename__ = "dataset_objects"

    version_id: Mapped[int] = mapped_column(ForeignKey("dataset_versions.id"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    path: Mapped[str] = mapped_column(String(64))
    sha256: Mapped[str] = mapped_column(ForeignKey("shards.sha256"))
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    rows: Mapped[int] = mapped_column(BigInteger)


class Shard(Base):
    """A validated shard blob: its rows were checked by the row rules of `kind` when it was received."""

    __tablename__ = "shards"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    rows: Mapped[int] = mapped_column(BigInteger)
    lines: Mapped[int] = mapped_column(BigInteger)
    tool_rows: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)


class DatasetAlias(Base):
    __tablename__ = "dataset_aliases"

    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id"), primary_key=True)
    alias: Mapped[str] = mapped_column(String(64), primary_key=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("dataset_versions.id"))
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)


class DatasetAliasMove(Base):
    """Alias history: every version an alias pointed at, oldest first."""

    __tablename__ = "dataset_alias_moves"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id"), index=True)
    alias: Mapped[str] = mapped_column(String(64))
    version_id: Mapped[int] = mapped_column(ForeignKey("dataset_versions.id"))
    moved_at: Mapped[datetime] = mapped_column(UtcDateTime)


class UploadSession(Base):
    """A resumable dataset upload, keyed by its content so the same command reaches the same session."""

    __tablename__ = "upload_sessions"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    content_key: Mapped[str] = mapped_column(String(64), unique=True)
    namespace: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(64))
    format: Mapped[str] = mapped_column(String(32))
    digest: Mapped[str] = mapped_column(String(71))
    manifest: Mapped[list] = mapped_column(JSON)
    phase: Mapped[str] = mapped_column(String(16))
    version_id: Mapped[int | None] = mapped_column(ForeignKey("dataset_versions.id"))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime)


class Event(Base):
    """The append-only log of every change, for followers and audits."""

    __tablename__ = "events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime)
    subject: Mapped[str] = mapped_column(String(200), index=True)
    kind: Mapped[str] = mapped_column(String(64))
    data: Mapped[dict] = mapped_column(JSON)


class BaseModelSelection(Base):
    """A base model fetched, imported or built into this deployment's model cache, at a recorded commit."""

    __tablename__ = "base_model_selections"

    entry_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    repository: Mapped[str] = mapped_column(String(200))
    commit: Mapped[str] = mapped_column(String(64))
    content_digest: Mapped[str] = mapped_column(String(64))
    source: Mapped[str] = mapped_column(String(16))
    path: Mapped[str] = mapped_column(Text)
    selected_at: Mapped[datetime] = mapped_column(UtcDateTime)


class Analysis(Base):
    """One dataset analysis, kept per (examples, base model commit, Optimize version)."""

    __tablename__ = "analyses"
    __table_args__ = (UniqueConstraint("examples_digest", "base_commit", "optimize_version",
                                       name="uq_analyses_examples_commit_version"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    examples_digest: Mapped[str] = mapped_column(String(71))
    kind: Mapped[str] = mapped_column(String(16))
    base_entry_id: Mapped[str] = mapped_column(String(200))
    base_commit: Mapped[str] = mapped_column(String(64))
    optimize_version: Mapped[str] = mapped_column(String(32))
    dataset_reference: Mapped[str] = mapped_column(String(200))
    phase: Mapped[str] = mapped_column(String(16))
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    lease_token: Mapped[str | None] = mapped_column(String(64))
    reason: Mapped[str | None] = mapped_column(Text)
    refused: Mapped[bool] = mapped_column(Boolean, default=False)
    report: Mapped[dict | None] = mapped_column(JSON)
    lengths_sha256: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
