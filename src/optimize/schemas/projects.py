"""Training projects: `/v1/training/projects` (create, read, list, archive, unarchive, scores)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from optimize.schemas.common import Answer, Number


class ProjectRequest(BaseModel):
    """`POST /v1/training/projects`."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="Project name; also the registry namespace its models go under")
    description: str | None = Field(default=None, description="Free text")


class Project(Answer):
    """A training project; its models go under the registry namespace of the same name."""

    name: str = Field(description="Project name")
    namespace: str = Field(description="The registry namespace its models go under (the same name)")
    description: str | None = Field(description="Free text")
    archived: bool = Field(description="Whether it is archived (left out of lists with its work; takes no new work)")
    created_at: str = Field(description="When it was created (ISO 8601, UTC)")
    runs: int = Field(description="Runs in the project")


class ProjectList(Answer):
    projects: list[Project] = Field(description="Projects, newest first")


class RegistryNamespaceState(Answer):
    """The registry namespace named like the project: separate state, left as it is."""

    name: str = Field(description="Namespace name")
    exists: bool = Field(description="Whether it exists")
    archived: bool = Field(description="Whether it is archived")


class ProjectChange(Project):
    """A project after archive or unarchive."""

    changed: bool = Field(description="Whether this request changed it")
    registry_namespace: RegistryNamespaceState = Field(description="The registry namespace of the same name")


class ScoreCell(Answer):
    model: str = Field(description="The model evaluated")
    evaluation_id: str = Field(description="The evaluation the score comes from")
    mean_score: Number | None = Field(description="Its mean score")


class ScoreColumn(ScoreCell):
    configuration: str = Field(description="The model name and the config hash of the run that trained it")


class ScoreGroup(Answer):
    base_model: str = Field(description="The base model's entry id")
    base_commit: str = Field(description="The base model commit the scores are for")
    baseline: ScoreCell | None = Field(description="The base model's own score; null when not evaluated")
    columns: list[ScoreColumn] = Field(description="One per training configuration: its newest completed evaluation")


class Scores(Answer):
    """A project's scores for one dataset and grader, grouped by base model commit."""

    project: str = Field(description="Project name")
    dataset: str | None = Field(description="The dataset version compared; null when nothing was evaluated")
    grader: str | None = Field(description="The grader compared; null when nothing was evaluated")
    groups: list[ScoreGroup] = Field(description="One per base model commit")
