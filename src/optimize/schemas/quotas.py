"""Per-project quotas as the API shows them: under `training capacity` (each project's quota and use) and
`registry info` (the deployment's default and the projects set apart)."""

from __future__ import annotations

from pydantic import Field

from optimize.schemas.common import Answer


class QuotaFigures(Answer):
    """One figure per quota (limits, or what is used now)."""

    open_runs: int = Field(description="Runs not yet ended (queued, running or paused)")
    queued_work: int = Field(description="Runs, evaluations and endpoints waiting for devices")
    upload_sessions: int = Field(description="Open dataset upload sessions into the project's namespace")
    stored_bytes: int = Field(description="Bytes of the namespace's dataset versions and open uploads")


class ProjectQuota(Answer):
    """A project's quota and its use."""

    project: str = Field(description="The training project (and the registry namespace of the same name)")
    quota: QuotaFigures = Field(description="What it may hold at once")
    used: QuotaFigures = Field(description="What it holds now")


class QuotaSettings(Answer):
    """The deployment's quotas: every project gets the default unless it is set apart."""

    default: QuotaFigures = Field(description="The quota of every project not set apart (OPTIMIZE_QUOTA_*)")
    projects: dict[str, QuotaFigures] = Field(description="Projects set apart (OPTIMIZE_PROJECT_QUOTAS)")
