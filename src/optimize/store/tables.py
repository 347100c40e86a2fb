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
    Float,
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
    # How a file of another format became this version (source format, rules applied); None when it was
    # registered as it is.
    conversion: Mapped[dict | None] = mapped_column(JSON)
    # What produced it, when a job did (a distillation: its id, the teacher and its commit, the source version);
    # None for an upload.
    lineage: Mapped[dict | None] = mapped_column(JSON)
    # prepared token rows: the descriptor (tokenizer, chatTemplateSha256, files) and the longest row, in tokens
    prepared: Mapped[dict | None] = mapped_column(JSON)
    images: Mapped[list | None] = mapped_column(JSON)  # the images its rows name: {path, sha256, bytes}


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
    longest: Mapped[int | None] = mapped_column(BigInteger)  # a Parquet file of prepared rows: its longest row
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)


class RegistryImage(Base):
    """An image blob the registry checked when it arrived (chat/images): rows name it by the sha256 of its bytes."""

    __tablename__ = "registry_images"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    format: Mapped[str] = mapped_column(String(8))
    width: Mapped[int] = mapped_column(Integer)
    height: Mapped[int] = mapped_column(Integer)
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
    moved_by: Mapped[str | None] = mapped_column(String(64))  # the token's name; null: the server, or not kept


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
    conversion: Mapped[dict | None] = mapped_column(JSON)
    prepared: Mapped[dict | None] = mapped_column(JSON)  # the descriptor of prepared token rows
    images: Mapped[list | None] = mapped_column(JSON)  # the images the rows name: {path, sha256, bytes}


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
    revision: Mapped[str | None] = mapped_column(String(200))  # what `--revision` asked for, when it was given
    parameters: Mapped[int | None] = mapped_column(BigInteger)  # counted in the selected files' safetensors


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
    reason: Mapped[str | None] = mapped_column(Text)
    refused: Mapped[bool] = mapped_column(Boolean, default=False)
    report: Mapped[dict | None] = mapped_column(JSON)
    lengths_sha256: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    progress: Mapped[dict | None] = mapped_column(JSON)  # rows measured of rows total, as its worker last reported


class Project(Base):
    """A training project; its name is the registry namespace its models go under."""

    __tablename__ = "projects"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    description: Mapped[str | None] = mapped_column(Text)
    archived: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    # its standing evaluation (all null when none): the dataset reference and the grader as they were given
    standing_dataset: Mapped[str | None] = mapped_column(String(200))
    standing_grader: Mapped[str | None] = mapped_column(String(500))
    standing_grader_instructions: Mapped[str | None] = mapped_column(Text)
    standing_set_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class Run(Base):
    """One training run: its frozen plan, its phase, and what its attempts reported."""

    __tablename__ = "runs"
    __table_args__ = (UniqueConstraint("submission_id", name="uq_runs_submission_id"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    submission_id: Mapped[str] = mapped_column(String(128))
    submission_digest: Mapped[str] = mapped_column(String(64))
    project: Mapped[str] = mapped_column(ForeignKey("projects.name"), index=True)
    method: Mapped[str] = mapped_column(String(16))
    phase: Mapped[str] = mapped_column(String(16), index=True)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    plan: Mapped[dict] = mapped_column(JSON)  # the document as submitted
    resolved: Mapped[dict] = mapped_column(JSON)  # config + execution with every default filled in
    sources: Mapped[dict] = mapped_column(JSON)  # path -> stated | default | defaultKernels | memoryEstimate
    config_hash: Mapped[str] = mapped_column(String(64))
    base_entry_id: Mapped[str] = mapped_column(String(200))
    base_commit: Mapped[str] = mapped_column(String(64))
    dataset_reference: Mapped[str] = mapped_column(String(200))
    dataset_digest: Mapped[str] = mapped_column(String(71))
    dataset_rows: Mapped[int] = mapped_column(BigInteger)
    validation_reference: Mapped[str | None] = mapped_column(String(200))
    validation_digest: Mapped[str | None] = mapped_column(String(71))
    model_name: Mapped[str] = mapped_column(String(64))
    device_profile: Mapped[str] = mapped_column(String(64))
    device_count: Mapped[int] = mapped_column(Integer)
    description: Mapped[str | None] = mapped_column(Text)
    config_name: Mapped[str | None] = mapped_column(String(64))  # its column in scores tables (the plan's configName)
    warnings: Mapped[list] = mapped_column(JSON, default=list)
    failure_reason: Mapped[str | None] = mapped_column(Text)
    progress: Mapped[dict] = mapped_column(JSON, default=dict)  # rows done/total, observed step, total steps
    checks: Mapped[dict | None] = mapped_column(JSON)
    length_check: Mapped[dict | None] = mapped_column(JSON)  # the analyses each dataset was checked against
    pause: Mapped[dict | None] = mapped_column(JSON)  # the current attempt's pause: checkpoint, saved step, release
    resumed: Mapped[dict | None] = mapped_column(JSON)  # what the latest resume restored, and the pause it ended
    parent_run_id: Mapped[str | None] = mapped_column(String(32), index=True)  # set on a branch
    branch: Mapped[dict | None] = mapped_column(JSON)  # parent, snapshot, step, restore mode and why
    pipeline: Mapped[dict | None] = mapped_column(JSON)  # the pipeline and stage it runs for: {pipelineId, stage}
    results: Mapped[dict] = mapped_column(JSON, default=dict)
    cost: Mapped[dict] = mapped_column(JSON, default=dict)
    phase_times: Mapped[dict] = mapped_column(JSON, default=dict)  # phase -> [entered iso, left iso|None]
    model_reference: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    # the pre-flight estimate (steps, tokens, training seconds and its basis), recorded before devices are claimed
    prediction: Mapped[dict | None] = mapped_column(JSON)
    # the predicted peak device memory and why gradient checkpointing is what it is (training.admission.memory)
    memory: Mapped[dict | None] = mapped_column(JSON)
    # a reinforcement run's guards: window, first window's reward, warnings, the stop asked (training.server.guards)
    guards: Mapped[dict | None] = mapped_column(JSON)


class RunAttempt(Base):
    """One attempt of a run: a worker process holding a lease, and the devices it was granted."""

    __tablename__ = "run_attempts"

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    number: Mapped[int] = mapped_column(Integer, primary_key=True)
    lease_token: Mapped[str] = mapped_column(String(64), unique=True)  # its lease in job_leases
    devices: Mapped[list] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16))  # active | ended
    started_at: Mapped[datetime] = mapped_column(UtcDateTime)
    ended_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    end_reason: Mapped[str | None] = mapped_column(Text)


class JobLease(Base):
    """One grant of a job to a worker: the token every write of that worker carries, until when it holds without a
    heartbeat, and the devices it was given. Open while `ended_at` is null; at most one open lease per job."""

    __tablename__ = "job_leases"

    token: Mapped[str] = mapped_column(String(64), primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))
    job_id: Mapped[str] = mapped_column(String(32), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    devices: Mapped[list] = mapped_column(JSON)
    granted_at: Mapped[datetime] = mapped_column(UtcDateTime)
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime)
    ended_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    end_reason: Mapped[str | None] = mapped_column(Text)


class DeviceHold(Base):
    """A device held by a job until it has ended: the primary key keeps any device to one holder."""

    __tablename__ = "device_holds"

    device_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    subject: Mapped[str] = mapped_column(String(200), index=True)  # e.g. run:<id>
    kind: Mapped[str] = mapped_column(String(32))
    project: Mapped[str | None] = mapped_column(String(64))
    since: Mapped[datetime] = mapped_column(UtcDateTime)


class RunMetric(Base):
    """One logged figure set of a run at an optimizer step (kind train or validation)."""

    __tablename__ = "run_metrics"

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16), primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer)
    values: Mapped[dict] = mapped_column(JSON)
    at: Mapped[datetime] = mapped_column(UtcDateTime)


class Snapshot(Base):
    """A committed save: its artifact kinds' manifests are in the blob store; nothing else is ever listed."""

    __tablename__ = "snapshots"
    __table_args__ = (UniqueConstraint("run_id", "attempt", "step", name="uq_snapshots_run_attempt_step"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    step: Mapped[int] = mapped_column(Integer)
    epoch: Mapped[float | None] = mapped_column()
    final: Mapped[bool] = mapped_column(Boolean, default=False)
    artifacts: Mapped[list] = mapped_column(JSON)  # [{kind, manifestDigest, bytes}]
    committed_at: Mapped[datetime] = mapped_column(UtcDateTime)
    pinned: Mapped[list | None] = mapped_column(JSON)  # kinds an operator holds against retention
    swept: Mapped[list | None] = mapped_column(JSON)  # kinds retention removed from the catalog
    registered: Mapped[list | None] = mapped_column(JSON)  # model versions registered from its weights


class Model(Base):
    __tablename__ = "models"
    __table_args__ = (UniqueConstraint("namespace", "name", name="uq_models_namespace_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    namespace: Mapped[str] = mapped_column(ForeignKey("namespaces.name"), index=True)
    name: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)


class ModelVersion(Base):
    """An immutable model version: what a serving process loads, its digest, and what it was trained over."""

    __tablename__ = "model_versions"
    __table_args__ = (
        UniqueConstraint("model_id", "version", name="uq_model_versions_model_version"),
        UniqueConstraint("model_id", "digest", name="uq_model_versions_model_digest"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"), index=True)
    version: Mapped[int] = mapped_column(Integer)
    digest: Mapped[str] = mapped_column(String(71))
    variant: Mapped[str] = mapped_column(String(16))  # BASE | ADAPTER | WEIGHTS
    descriptor: Mapped[dict] = mapped_column(JSON)  # servingModel: what a serving process loads
    lineage: Mapped[dict] = mapped_column(JSON)  # baseModel, datasets, producedBy
    produced_by_kind: Mapped[str | None] = mapped_column(String(16))
    produced_by_id: Mapped[str | None] = mapped_column(String(100), index=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)


class ModelAlias(Base):
    """Where a model's alias points now (`candidate`, `champion`, …); `latest` is the newest version, kept by the
    registry and never stored here."""

    __tablename__ = "model_aliases"

    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"), primary_key=True)
    alias: Mapped[str] = mapped_column(String(64), primary_key=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("model_versions.id"))
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)


class ModelAliasMove(Base):
    """Model alias history: every version an alias pointed at, oldest first, and who moved it."""

    __tablename__ = "model_alias_moves"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"), index=True)
    alias: Mapped[str] = mapped_column(String(64))
    version_id: Mapped[int] = mapped_column(ForeignKey("model_versions.id"))
    moved_at: Mapped[datetime] = mapped_column(UtcDateTime)
    moved_by: Mapped[str | None] = mapped_column(String(64))


class Evaluation(Base):
    """One evaluation: a model's answers to a dataset's prompts, scored by a grader, as a job on a device."""

    __tablename__ = "evaluations"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    project: Mapped[str] = mapped_column(ForeignKey("projects.name"), index=True)
    model_reference: Mapped[str] = mapped_column(String(200))  # as resolved: NS/NAME:vN or the base model id
    model: Mapped[dict] = mapped_column(JSON)  # base entry and commit, and the adapter's weights manifest
    dataset_reference: Mapped[str] = mapped_column(String(200))
    dataset_digest: Mapped[str] = mapped_column(String(71))
    dataset_rows: Mapped[int] = mapped_column(BigInteger)
    grader: Mapped[str] = mapped_column(String(500))
    device_profile: Mapped[str] = mapped_column(String(64))
    phase: Mapped[str] = mapped_column(String(16), index=True)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    devices: Mapped[list | None] = mapped_column(JSON)
    progress: Mapped[dict] = mapped_column(JSON, default=dict)
    report: Mapped[dict | None] = mapped_column(JSON)
    failure_reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class Distillation(Base):
    """One distillation: a teacher's answers to a source chat dataset's decisions, as a job on a device; the
    accepted answers registered as a version of the target dataset."""

    __tablename__ = "distillations"
    __table_args__ = (UniqueConstraint("submission_id", name="uq_distillations_submission_id"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    project: Mapped[str] = mapped_column(ForeignKey("projects.name"), index=True)
    submission_id: Mapped[str | None] = mapped_column(String(128))  # the request's idempotency key, if it had one
    submission_digest: Mapped[str | None] = mapped_column(String(64))  # the request it was given for
    teacher_reference: Mapped[str] = mapped_column(String(200))  # as resolved: NS/NAME:vN or the base model id
    teacher: Mapped[dict] = mapped_column(JSON)  # base entry and commit, and the adapter's weights manifest
    source_reference: Mapped[str] = mapped_column(String(200))
    source_digest: Mapped[str] = mapped_column(String(71))
    source_rows: Mapped[int] = mapped_column(BigInteger)
    target: Mapped[str] = mapped_column(String(200))  # NS/NAME the accepted rows are registered under
    settings: Mapped[dict] = mapped_column(JSON)  # replicas, maxTokens, maxModelLength, sampling, smoke, thinking
    device_profile: Mapped[str] = mapped_column(String(64))
    phase: Mapped[str] = mapped_column(String(16), index=True)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    devices: Mapped[list | None] = mapped_column(JSON)
    progress: Mapped[dict] = mapped_column(JSON, default=dict)  # decisions, answered, accepted, rejected by reason
    smoke: Mapped[dict | None] = mapped_column(JSON)  # the smoke's decisions, accepted, and the lines it failed on
    registered: Mapped[dict | None] = mapped_column(JSON)  # the dataset version registered: reference, digest
    failure_reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class Comparison(Base):
    """A comparison: a source snapshot's model and candidate models scored on one evaluation dataset with one grader
    and one completion-token budget, each by an evaluation (reused where one was done for the same version, dataset
    version, grader and budget), then the winner named and, when asked, promoted."""

    __tablename__ = "comparisons"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    project: Mapped[str] = mapped_column(ForeignKey("projects.name"), index=True)
    source_snapshot_id: Mapped[str] = mapped_column(String(32))
    entries: Mapped[list] = mapped_column(JSON)  # [{model, role, run, evaluationId, reused}], the source first
    dataset_reference: Mapped[str] = mapped_column(String(200))
    dataset_digest: Mapped[str] = mapped_column(String(71))
    dataset_rows: Mapped[int] = mapped_column(BigInteger)
    grader: Mapped[str] = mapped_column(String(500))
    max_new_tokens: Mapped[int] = mapped_column(Integer)
    device_profile: Mapped[str] = mapped_column(String(64))
    promote: Mapped[str | None] = mapped_column(String(64))  # the alias moved to the winner, when its margin clears
    margin: Mapped[float] = mapped_column(Float, default=0.0)  # the least margin a promotion needs
    phase: Mapped[str] = mapped_column(String(16), index=True)
    result: Mapped[dict | None] = mapped_column(JSON)  # scores, intervals, the winner, its margin, spend, promotion
    failure_reason: Mapped[str | None] = mapped_column(Text)
    created_by: Mapped[str | None] = mapped_column(String(200))  # the token's name, who a promotion is moved by
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class Pipeline(Base):
    """A pipeline: its plan's ordered stages, each run as a job of its own kind once the stages before it completed,
    with `@STAGE` replaced by what that stage gave (a model or dataset version)."""

    __tablename__ = "pipelines"
    __table_args__ = (UniqueConstraint("submission_id", name="uq_pipelines_submission_id"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    submission_id: Mapped[str] = mapped_column(String(128))
    project: Mapped[str] = mapped_column(ForeignKey("projects.name"), index=True)
    plan: Mapped[dict] = mapped_column(JSON)  # the document as submitted
    stages: Mapped[list] = mapped_column(JSON)  # per stage: {name, type, jobKind, jobId, attempt, seen}
    phase: Mapped[str] = mapped_column(String(16), index=True)
    failure_reason: Mapped[str | None] = mapped_column(Text)
    created_by: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class DistillationAnswer(Base):
    """One decision answered by a distillation's teacher: accepted (with the row it makes) or rejected (with the
    reason and the output). Saved in chunks as the worker answers, so a resumed distillation answers none twice."""

    __tablename__ = "distillation_answers"

    distillation_id: Mapped[str] = mapped_column(ForeignKey("distillations.id"), primary_key=True)
    line: Mapped[int] = mapped_column(Integer, primary_key=True)
    message: Mapped[int] = mapped_column(Integer, primary_key=True)
    accepted: Mapped[bool] = mapped_column(Boolean)
    reason: Mapped[str | None] = mapped_column(String(32), index=True)
    detail: Mapped[str | None] = mapped_column(Text)
    output: Mapped[str] = mapped_column(Text)  # the teacher's answer as generated
    row: Mapped[dict | None] = mapped_column(JSON)  # the accepted row: history + the answer


class Curation(Base):
    """One curation: a judge model scoring the candidates of a project's sessions against the curation's instructions,
    as a job on a device; the candidates scored at its threshold or more registered as a version of its dataset."""

    __tablename__ = "curations"
    __table_args__ = (UniqueConstraint("key", name="uq_curations_key"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    key: Mapped[str] = mapped_column(String(128))  # the request's curationId: the same one reaches this curation
    request_digest: Mapped[str] = mapped_column(String(64))  # of the request without its key: a reuse must match
    project: Mapped[str] = mapped_column(ForeignKey("projects.name"), index=True)
    sessions: Mapped[list] = mapped_column(JSON)  # [{sessionHash, source, candidates}], in the request's order
    candidates: Mapped[int] = mapped_column(BigInteger)  # of all its sessions together
    judge_reference: Mapped[str] = mapped_column(String(200))  # as resolved: NS/NAME:vN or the base model id
    judge: Mapped[dict] = mapped_column(JSON)  # base entry and commit, and an adapter's weights manifest
    instructions: Mapped[str] = mapped_column(Text)
    threshold: Mapped[float] = mapped_column(Float)
    system_prompt: Mapped[str | None] = mapped_column(Text)
    dataset: Mapped[str] = mapped_column(String(200))  # NS/NAME the kept candidates are registered under
    device_profile: Mapped[str] = mapped_column(String(64))
    phase: Mapped[str] = mapped_column(String(16), index=True)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    devices: Mapped[list | None] = mapped_column(JSON)
    progress: Mapped[dict] = mapped_column(JSON, default=dict)  # total, judged, kept, rejected by reason
    registered: Mapped[dict | None] = mapped_column(JSON)  # the dataset version registered: reference, digest, rows
    failure_reason: Mapped[str | None] = mapped_column(Text)
    created_by: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class CurationVerdict(Base):
    """One candidate judged by a curation's judge: kept (with its score) or rejected (with the reason), the judge's
    reply kept. Saved in chunks as the worker judges, so a curation taken up again judges none twice."""

    __tablename__ = "curation_verdicts"

    curation_id: Mapped[str] = mapped_column(ForeignKey("curations.id"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True)  # across its sessions, in order (zero-based)
    candidate: Mapped[str] = mapped_column(Text)  # the candidate's id in its source
    session_hash: Mapped[str] = mapped_column(String(64))
    kept: Mapped[bool] = mapped_column(Boolean)
    score: Mapped[float | None] = mapped_column(Float)
    reason: Mapped[str | None] = mapped_column(String(32), index=True)
    detail: Mapped[str | None] = mapped_column(Text)
    output: Mapped[str] = mapped_column(Text)  # the judge's reply as generated


class EvaluationPrediction(Base):
    """One answer of an evaluation, with what it was answered from (template, base model commit) and its score."""

    __tablename__ = "evaluation_predictions"

    evaluation_id: Mapped[str] = mapped_column(ForeignKey("evaluations.id"), primary_key=True)
    line: Mapped[int] = mapped_column(Integer, primary_key=True)
    prompt: Mapped[str] = mapped_column(Text)
    expected: Mapped[str] = mapped_column(Text)
    answer: Mapped[str] = mapped_column(Text)
    score: Mapped[float | None] = mapped_column()
    explanation: Mapped[str | None] = mapped_column(Text)
    fields: Mapped[dict | None] = mapped_column(JSON)
    # a sampling evaluation's answers to the row: [{answer, score, explanation, fields}], the first one above
    samples: Mapped[list | None] = mapped_column(JSON, nullable=True)
    chat_template_sha256: Mapped[str] = mapped_column(String(71))
    base_model_revision: Mapped[str] = mapped_column(String(64))
    at: Mapped[datetime] = mapped_column(UtcDateTime)



class Endpoint(Base):
    """One endpoint: a resident base model and the LoRA adapters attached to it, served by a worker on a
    device it holds until the endpoint is deleted."""

    __tablename__ = "endpoints"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    project: Mapped[str] = mapped_column(ForeignKey("projects.name"), index=True)
    model_reference: Mapped[str] = mapped_column(String(200))  # the model it was created for
    base: Mapped[dict] = mapped_column(JSON)  # baseEntryId and baseCommit of the resident model
    adapters: Mapped[list] = mapped_column(JSON, default=list)  # [{name, manifestDigest, weightsDigest, at}]
    device_profile: Mapped[str] = mapped_column(String(64))
    phase: Mapped[str] = mapped_column(String(24), index=True)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    devices: Mapped[list | None] = mapped_column(JSON)
    address: Mapped[str | None] = mapped_column(String(200))  # where its worker answers (127.0.0.1:PORT)
    failure_reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    ready_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    last_request_at: Mapped[datetime | None] = mapped_column(UtcDateTime)  # its idle time counts from here
    # what its worker last reported of its load (serving.batcher statistics); null before the first report
    load: Mapped[dict | None] = mapped_column(JSON)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class BaseModelAddition(Base):
    """A model an administrator added to this deployment's catalog (`base-models add`): the catalog entry, with
    the facts read from the repository's files at the commit it was pinned to."""

    __tablename__ = "base_model_additions"

    entry_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    repository: Mapped[str] = mapped_column(String(200), unique=True)
    entry: Mapped[dict] = mapped_column(JSON)  # the catalog entry, as the catalog file would spell it
    added_at: Mapped[datetime] = mapped_column(UtcDateTime)


class ApiToken(Base):
    """An API token: its sha256 (never the token), its role, and the projects and namespaces it is limited to
    (null: all). Revoking sets `revoked_at`; the row stays, so the list shows who had access."""

    __tablename__ = "api_tokens"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(64))
    role: Mapped[str] = mapped_column(String(16))
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    projects: Mapped[list | None] = mapped_column(JSON)
    namespaces: Mapped[list | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    created_by: Mapped[str | None] = mapped_column(String(32))  # the token that created it; null: the server
    last_used_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class Bundle(Base):
    """A named scoring bundle (NS/NAME): its versions are immutable ZIP archives."""

    __tablename__ = "bundles"
    __table_args__ = (UniqueConstraint("namespace", "name", name="uq_bundles_namespace_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    namespace: Mapped[str] = mapped_column(ForeignKey("namespaces.name"), index=True)
    name: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)


class BundleVersion(Base):
    """An immutable bundle version: the archive's bytes exactly as registered, a blob named by their sha256 (the
    version's digest is `sha256:` and it), and what the archive holds."""

    __tablename__ = "bundle_versions"
    __table_args__ = (
        UniqueConstraint("bundle_id", "version", name="uq_bundle_versions_bundle_version"),
        UniqueConstraint("bundle_id", "sha256", name="uq_bundle_versions_bundle_sha256"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    bundle_id: Mapped[int] = mapped_column(ForeignKey("bundles.id"), index=True)
    version: Mapped[int] = mapped_column(Integer)
    sha256: Mapped[str] = mapped_column(String(64), index=True)  # the archive's blob
    size_bytes: Mapped[int] = mapped_column(BigInteger)  # of the archive
    uncompressed_bytes: Mapped[int] = mapped_column(BigInteger)
    members: Mapped[list] = mapped_column(JSON)  # [{path, bytes}] in the archive's order; directories end with /
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)


class BundleAlias(Base):
    __tablename__ = "bundle_aliases"

    bundle_id: Mapped[int] = mapped_column(ForeignKey("bundles.id"), primary_key=True)
    alias: Mapped[str] = mapped_column(String(64), primary_key=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("bundle_versions.id"))
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)


class BundleAliasMove(Base):
    """Bundle alias history: every version an alias pointed at, oldest first."""

    __tablename__ = "bundle_alias_moves"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    bundle_id: Mapped[int] = mapped_column(ForeignKey("bundles.id"), index=True)
    alias: Mapped[str] = mapped_column(String(64))
    version_id: Mapped[int] = mapped_column(ForeignKey("bundle_versions.id"))
    moved_at: Mapped[datetime] = mapped_column(UtcDateTime)
    moved_by: Mapped[str | None] = mapped_column(String(64))


class RunRollout(Base):
    """A reinforcement run's sample of the rollouts of one update: a few prompt groups' completions with each reward
    term's score and the weighted total (`items`, bounded by the server), from the attempt that trained it."""

    __tablename__ = "run_rollouts"

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer)
    items: Mapped[list] = mapped_column(JSON)
    at: Mapped[datetime] = mapped_column(UtcDateTime)


class JobEdge(Base):
    """An edge of the job graph (`jobs.graph`): the job (`kind`, `job_id`) waits for the upstream job and takes its
    `output` (null: it only waits). `if_upstream_fails` says what an upstream that ended without completing does to
    it — `fail`: it ends too, naming the upstream; `proceed`: it goes on without that output. `waits_until`: past
    it the edge stops holding the job (it goes on without the output)."""

    __tablename__ = "job_edges"
    __table_args__ = (UniqueConstraint("kind", "job_id", "upstream_kind", "upstream_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(32))
    job_id: Mapped[str] = mapped_column(String(32), index=True)
    upstream_kind: Mapped[str] = mapped_column(String(32))
    upstream_id: Mapped[str] = mapped_column(String(32), index=True)
    output: Mapped[str | None] = mapped_column(String(32))
    if_upstream_fails: Mapped[str] = mapped_column(String(16))
    waits_until: Mapped[datetime | None] = mapped_column(UtcDateTime)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)


class StandingEvaluation(Base):
    """A model version's evaluation by its project's standing evaluation (`evaluation/standing.py`): one row per
    version, dataset and grader (as the project holds them), claimed before the evaluation is started; the
    evaluation started (`evaluation_id`), or the refusal of the last try (`refusal`); a refused start is tried again
    at most once a minute, a bounded number of times (`attempts` counts the tries)."""

    __tablename__ = "standing_evaluations"
    __table_args__ = (UniqueConstraint("model_version_id", "dataset", "grader",
                                       name="uq_standing_evaluations_version_dataset_grader"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    project: Mapped[str] = mapped_column(ForeignKey("projects.name"), index=True)
    model_version_id: Mapped[int] = mapped_column(ForeignKey("model_versions.id"), index=True)
    model_reference: Mapped[str] = mapped_column(String(200))  # NS/NAME:vN
    dataset: Mapped[str] = mapped_column(String(200))
    grader: Mapped[str] = mapped_column(String(500))
    evaluation_id: Mapped[str | None] = mapped_column(ForeignKey("evaluations.id"))
    refusal: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, default=1)
    claimed_at: Mapped[datetime] = mapped_column(UtcDateTime)
    attempted_at: Mapped[datetime] = mapped_column(UtcDateTime)


class ConversationSession(Base):
    """A session: a conversation corpus parsed into candidates (`optimize.sessions`), kept as one blob whose sha256
    is the session hash, in a project. The same content in the same project is one session."""

    __tablename__ = "sessions"
    __table_args__ = (UniqueConstraint("project", "sha256"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    sha256: Mapped[str] = mapped_column(String(64), index=True)  # the session hash: its candidates blob
    project: Mapped[str] = mapped_column(ForeignKey("projects.name"), index=True)
    source: Mapped[str] = mapped_column(String(16))  # oasst1 | otel | canonical
    records: Mapped[int] = mapped_column(BigInteger)  # what the parser read (trees, log records, records)
    candidates: Mapped[int] = mapped_column(BigInteger)
    skipped: Mapped[dict] = mapped_column(JSON)  # {reason: count}
    bytes: Mapped[int] = mapped_column(BigInteger)  # the candidates blob's size
    created_by: Mapped[str | None] = mapped_column(String(200))  # the token's name
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
