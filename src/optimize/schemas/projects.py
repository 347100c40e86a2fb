"""Training projects: `/v1/training/projects` (create, read, list, archive, unarchive, scores, the standing
evaluation)."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from optimize.schemas.common import Answer, Number
from optimize.schemas.requests import Refusal, RequestModel

DEFAULT_STANDING_GRADER = "json-label-match"  # the same default as an evaluation's


class ProjectRequest(BaseModel):
    """`POST /v1/training/projects`."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="Project name; also the registry namespace its models go under")
    description: str | None = Field(default=None, description="Free text")


class StandingEvaluationRequest(RequestModel):
    """`PUT /v1/training/projects/{name}/evaluation`: the evaluation every model version the project registers from
    now on gets, started by the server."""

    model_config = ConfigDict(extra="forbid")
    not_an_object: ClassVar[Refusal] = Refusal(
        "a standing evaluation needs dataset (a registered chat dataset, NS/NAME[:vN|:ALIAS])",
        hint="send a JSON object with dataset, and grader where not json-label-match")

    dataset: Annotated[str, Refusal(
        "dataset must be a registered chat dataset's reference, NS/NAME[:vN|:ALIAS] (at most 200 characters)",
        missing="a standing evaluation needs dataset: the registered chat dataset each new model version is "
                "evaluated on", hint="e.g. dataset: shipping/held-out")] = Field(
        min_length=1, max_length=200,
        description="The chat dataset each new version is evaluated on, kept as given: NS/NAME (or an alias) "
                    "resolves to its version when each evaluation starts, NS/NAME:vN pins one; without a "
                    "namespace, the project's")
    grader: Annotated[str, Refusal("grader must be a grader's name, as an evaluation takes it",
                                   hint="e.g. json-label-match, exact, contains, model:NS/NAME, bundle:NS/NAME#MODULE")
                      ] = Field(
        default=DEFAULT_STANDING_GRADER, min_length=1,
        description="The grader, as an evaluation takes it (default json-label-match): json-label-match, exact, "
                    "contains, regex:PATTERN, numeric[:TOLERANCE], http:URL, model:REF or "
                    "bundle:NS/NAME[:vN|:ALIAS]#MODULE[:FUNCTION] (resolved when each evaluation starts)")
    grader_instructions: Annotated[str | None, Refusal("graderInstructions must be a string of at most 20000 "
                                                       "characters")] = Field(
        default=None, max_length=20_000, description="Instructions for a judge model's grader (model:REF only)")


class StandingEvaluation(Answer):
    """A project's standing evaluation: what every model version it registers after `setAt` is evaluated on."""

    dataset: str = Field(description="The dataset reference, as given (resolved when each evaluation starts)")
    grader: str = Field(description="The grader, as given")
    grader_instructions: str | None = Field(description="A judge model's instructions; null: its own")
    set_at: str = Field(description="When it was set (ISO 8601, UTC); versions registered since are evaluated")


class Project(Answer):
    """A training project; its models go under the registry namespace of the same name."""

    name: str = Field(description="Project name")
    namespace: str = Field(description="The registry namespace its models go under (the same name)")
    description: str | None = Field(description="Free text")
    archived: bool = Field(description="Whether it is archived (left out of lists with its work; takes no new work)")
    created_at: str = Field(description="When it was created (ISO 8601, UTC)")
    runs: int = Field(description="Runs in the project")
    standing_evaluation: StandingEvaluation | None = Field(
        description="The evaluation every model version it registers gets, started by the server; null: none")


class ProjectList(Answer):
    projects: list[Project] = Field(description="Projects, newest first")


class RegistryNamespaceState(Answer):
    """The registry namespace named like the project: separate state, left as it is."""

    name: str = Field(description="Namespace name")
    exists: bool = Field(description="Whether it exists")
    archived: bool = Field(description="Whether it is archived")


class StandingEvaluationChange(Project):
    """A project after its standing evaluation was set or cleared."""

    changed: bool = Field(description="Whether this request changed it")


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
