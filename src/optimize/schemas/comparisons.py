"""Comparisons: `/v1/training/comparisons` (create, read, list, cancel, the answers to one row side by side)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import ConfigDict, Field

from optimize.schemas.common import Answer, DatasetPin, Number
from optimize.schemas.progress import Count
from optimize.schemas.requests import Refusal, RequestModel

MOST_CANDIDATES = 50  # models a comparison scores besides its source

# --- requests ----------------------------------------------------------------------------------------------



def _names(field: str, what: str) -> Refusal:
    return Refusal(f"{field} must be a list of strings ({what})")


class ComparisonRequest(RequestModel):
    """`POST /v1/training/comparisons`."""

    model_config = ConfigDict(extra="forbid")
    not_an_object: ClassVar[Refusal] = Refusal("a comparison needs source and dataset, and at least one of "
                                               "candidates, branches or allBranches")

    source: Annotated[str, Refusal("a comparison needs source (a snapshot id or its unambiguous prefix)")] = Field(
        pattern=r"\S", description="The source snapshot: its weights are registered as a model version (the "
                                   "same weights: the same version) and scored beside the candidates")
    candidates: Annotated[list[str], _names("candidates", "registered models NS/NAME[:vN|:ALIAS]")] = Field(
        default_factory=list, description="Registered models compared: NS/NAME[:vN|:ALIAS] (resolved to a version "
                                          "now)")
    branches: Annotated[list[str], _names("branches", "run ids")] = Field(
        default_factory=list, description="Completed runs whose registered model is compared (run ids or prefixes)")
    all_branches: Annotated[list[str], _names("allBranches", "parent run ids")] = Field(
        default_factory=list, description="Parent runs: every completed branch of the parent from the source "
                                          "snapshot is compared (the fan)")
    dataset: Annotated[str, Refusal("a comparison needs dataset (a registered chat dataset NS/NAME[:vN|:ALIAS])")
                       ] = Field(pattern=r"\S", description="The evaluation dataset every model answers: "
                                                            "NS/NAME[:vN|:ALIAS|@sha256:HEX], frozen to a version now")
    grader: Annotated[str | None, Refusal("grader must be a string")] = Field(
        default="json-label-match", description="The one grader of every answer (as `evaluations start` takes it)")
    grader_instructions: Annotated[str | None, Refusal("graderInstructions must be a string")] = Field(
        default=None, description="Instructions for a judge model's grader (model:REF only)")
    max_new_tokens: Annotated[int, Refusal("maxNewTokens must be an integer from 1 to 32768")] = Field(
        default=256, ge=1, le=32768, description="The completion-token budget of every answer")
    device_profile: Annotated[str | None, Refusal("deviceProfile must be a string")] = Field(
        default="cpu", description="The device profile its evaluations run on")
    promote: Annotated[str | None, Refusal("promote must be an alias name (e.g. champion)")] = Field(
        default=None, description="An alias moved to the winner once the result is Complete and the winner's "
                                  "margin is at least `margin`")
    margin: Annotated[float, Refusal("margin must be a number from 0 to 1000000")] = Field(
        default=0.0, ge=0, le=1e6, description="The least margin (winner's mean score minus the runner-up's) a "
                                               "promotion needs")


# --- answers ------------------------------------------------------------------------------------------------

Role = Literal["source", "candidate", "branch"]


class ComparisonEntry(Answer):
    model: str = Field(description="The model version compared, as resolved at creation: NS/NAME:vN")
    role: Role = Field(description="source (the source snapshot's weights), candidate (named) or branch (a run's)")
    run_id: str | None = Field(description="The run that trained it, for a source or a branch")
    evaluation_id: str = Field(description="The evaluation that scores it")
    reused: bool = Field(description="Whether that evaluation was done (or started) before the comparison")
    evaluation_phase: str = Field(description="The evaluation's phase now")


class ComparisonScore(Answer):
    model: str = Field(description="The model version")
    role: Role = Field(description="source, candidate or branch")
    mean_score: Number = Field(description="Mean score over the rows its grader scored")
    low: Number = Field(description="Lower bound of the 95% confidence interval of the mean (bootstrap over rows)")
    high: Number = Field(description="Upper bound of that interval")
    rows: int = Field(description="Rows scored")
    versus_source: Number | None = Field(description="Its mean score minus the source's (null: the source itself, "
                                                     "or the source was not scored)")


class ComparisonWinner(Answer):
    model: str = Field(description="The model version with the highest mean score")
    role: Role = Field(description="source, candidate or branch")
    mean_score: Number = Field(description="Its mean score")
    runner_up: str = Field(description="The model with the next highest mean score")
    margin: Number = Field(description="Its mean score minus the runner-up's")
    margin_low: Number = Field(description="Lower bound of the margin's 95% interval (paired bootstrap over the rows "
                                           "both scored)")
    margin_high: Number = Field(description="Upper bound of that interval")


class ComparisonFailure(Answer):
    model: str = Field(description="The model version that could not be scored")
    evaluation_id: str = Field(description="Its evaluation")
    phase: str = Field(description="The phase its evaluation ended in")
    reason: str | None = Field(description="Why, as the evaluation says")


class Spend(Answer):
    device_seconds: Number = Field(description="Device seconds")


class ComparisonSpend(Answer):
    training: Spend = Field(description="What training the compared models cost (their runs' device seconds), kept "
                                        "apart from the comparison's own")
    comparison: Spend = Field(description="What the evaluations this comparison started cost")
    evaluations_started: int = Field(description="Evaluations it started")
    evaluations_reused: int = Field(description="Evaluations it reused (done, or started, before it)")


class Promotion(Answer):
    alias: str = Field(description="The alias asked to move to the winner")
    least_margin: Number = Field(description="The margin it needed")
    model: str | None = Field(description="Where the alias points now, when it was moved (NS/NAME:vN)")
    moved: bool = Field(description="Whether the comparison moved it (false: it already pointed there, or it was "
                                    "not promoted)")
    why_not: str | None = Field(description="Why it was not promoted: a Partial result, no winner, or a margin "
                                            "short of the least")


class Fan(Answer):
    parent_run_id: str = Field(description="The parent whose branches were compared")
    branches: int = Field(description="Its branches from the source snapshot")
    compared: int = Field(description="Those compared (completed, with a registered model)")
    skipped: list[dict[str, str]] = Field(description="Those not compared, with their phase: {runId, phase}")


class ComparisonSource(Answer):
    snapshot_id: str = Field(description="The source snapshot")
    run_id: str = Field(description="The run that saved it")
    step: int = Field(description="The step it was saved at")
    model: str = Field(description="Its weights as a registered model version")


class Comparison(Answer):
    comparison_id: str = Field(description="The comparison's id")
    project: str = Field(description="The project of the source snapshot's run")
    source: ComparisonSource = Field(description="The source snapshot and its model version")
    dataset: DatasetPin = Field(description="The evaluation dataset version every model answers")
    grader: str = Field(description="The grader, as its evaluations keep it")
    max_new_tokens: int = Field(description="The completion-token budget of every answer")
    device_profile: str = Field(description="Where its evaluations run")
    entries: list[ComparisonEntry] = Field(description="Every model compared, the source first")
    fans: list[Fan] = Field(description="The fans (a parent's branches from the source snapshot) it compares")
    phase: str = Field(description="EVALUATING, SCORING, COMPLETED, FAILED or CANCELLED")
    count: Count | None = Field(description="Evaluations ended of all")
    result: Literal["Complete", "Partial"] | None = Field(
        description="Complete: every model was scored; Partial: some could not be (a partial result names no winner)")
    scores: list[ComparisonScore] = Field(description="Each scored model, highest mean score first")
    winner: ComparisonWinner | None = Field(description="The winner (a Complete result's, unless the top two tie)")
    failed: list[ComparisonFailure] = Field(description="The models that could not be scored")
    spend: ComparisonSpend | None = Field(description="Training spend, apart from the comparison's own")
    promotion: Promotion | None = Field(description="The promotion asked for, and what came of it")
    failure_reason: str | None = Field(description="Why it failed")
    created_by: str | None = Field(description="The name of the token that created it")
    created_at: str = Field(description="When it was created")
    finished_at: str | None = Field(description="When it ended")
    terminal: bool = Field(description="Whether it has ended")
    settled: bool = Field(description="Whether `wait` stops here")


class ComparisonList(Answer):
    comparisons: list[Comparison] = Field(description="Newest first")


class RowAnswer(Answer):
    model: str = Field(description="The model version")
    role: Role = Field(description="source, candidate or branch")
    answer: str | None = Field(description="Its answer to the row (null: not answered)")
    score: Number | None = Field(description="The grader's score of it")
    explanation: str | None = Field(description="The grader's explanation")


class ComparisonRow(Answer):
    comparison_id: str = Field(description="The comparison")
    line: int = Field(description="The dataset's line (from 1, as an evaluation's predictions number them)")
    lines: int = Field(description="Lines in the dataset")
    prompt: str | None = Field(description="The row's prompt as the models saw it")
    expected: str | None = Field(description="The row's own answer")
    answers: list[RowAnswer] = Field(description="Each model's answer to it, in the entries' order")
