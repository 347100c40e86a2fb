"""Evaluations: `/v1/training/evaluations` (start, read, list, cancel, retry, predictions)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import Field

from optimize.schemas.common import Answer, BaseModelPin, DatasetPin, Number
from optimize.schemas.progress import Count
from optimize.schemas.requests import Refusal, RequestModel

# --- requests ----------------------------------------------------------------------------------------------


_NEEDS = Refusal("an evaluation needs model (a base model or NS/NAME[:vN]) and dataset (a registry reference)")
MAX_GENERATIONS = 16


class EvaluationRequest(RequestModel):
    """`POST /v1/training/evaluations`."""

    not_an_object: ClassVar[Refusal] = _NEEDS

    model: Annotated[str, _NEEDS] = Field(
        description="The model evaluated: a base model, or a registered model NS/NAME[:vN|:ALIAS]")
    dataset: Annotated[str, _NEEDS] = Field(
        description="The chat dataset whose prompts it answers: a registry reference NS/NAME[:vN|:ALIAS|@sha256:HEX]; "
                    "one without a namespace is the project's")
    project: Annotated[str | None, Refusal("project must be a string")] = Field(
        default=None, description="The project the evaluation counts for (a registered model's own; needed for a "
                                  "base model)")
    device_profile: Annotated[str | None, Refusal("deviceProfile must be a string")] = Field(
        default="cpu", description="The device profile it runs on")
    grader: Annotated[str | None, Refusal("grader must be a string")] = Field(
        default="json-label-match",
        description="json-label-match, exact, contains, regex:PATTERN, numeric[:TOLERANCE] (the built-in members), "
                    "http:URL (a scoring service), model:REF (a judge model) or bundle:NS/NAME[:vN|:ALIAS]#MODULE"
                    "[:FUNCTION] (a registered scoring bundle's function, FUNCTION by default compute_score)")
    grader_instructions: Annotated[str | None, Refusal("graderInstructions must be a string")] = Field(
        default=None, description="Instructions for a judge model's grader (model:REF only; default: the "
                                  "instructions a judge adapter was trained with)")
    max_new_tokens: Annotated[int, Refusal("maxNewTokens must be an integer from 1 to 32768")] = Field(
        default=256, ge=1, le=32768, description="Most tokens generated per answer")
    generations: Annotated[int, Refusal(
        f"generations must be an integer from 1 to {MAX_GENERATIONS}",
        hint="answers sampled per prompt; 4 to 8 is what a reinforcement run's groups hold")] = Field(
        default=1, ge=1, le=MAX_GENERATIONS, description="Answers sampled per prompt (more than one: a sampling "
                                                         "evaluation, at a temperature)")
    temperature: Annotated[float | None, Refusal("temperature must be a number from 0 to 2")] = Field(
        default=None, ge=0, le=2, description="Sampling temperature (default: greedy for one answer, 0.7 for several)")
    seed: Annotated[int, Refusal("seed must be an integer from 0 to 4294967295")] = Field(
        default=0, ge=0, le=2**32 - 1, description="Seed of the sampled answers")
    rows: Annotated[int | None, Refusal("rows must be a positive integer (the first rows asked)")] = Field(
        default=None, ge=1, description="Ask only the first rows (default: every row)")
    response_schema: Annotated[dict[str, Any] | None, Refusal("responseSchema must be a JSON schema (an object)")] = \
        Field(default=None, description="A JSON schema every answer keeps to: the model answers under its grammar "
                                        "(constrained decoding), so each answer parses")


# --- answers ------------------------------------------------------------------------------------------------


class EvaluationProgress(Answer):
    answered: int = Field(description="Rows answered so far (kept answers of an earlier attempt included)")
    total: int = Field(description="Rows to answer")


class FieldAccuracy(Answer):
    field: str = Field(description="A field's path in the expected answer")
    accuracy: Number = Field(description="Share of scored examples that got it right, 0 to 1")
    examples: int = Field(description="Scored examples that hold it")


class SamplingReport(Answer):
    answers: int = Field(description="Answers sampled and graded, every row's group together")
    std: Number | None = Field(description="Standard deviation of their scores; null with fewer than two")
    groups: int = Field(description="Rows with at least two scored answers")
    zero_variance_share: Number | None = Field(description="Share of those rows whose answers all score the same "
                                                           "(a reinforcement update learns nothing from them)")


class Sampling(Answer):
    generations: int = Field(description="Answers sampled per prompt")
    temperature: Number = Field(description="Their temperature")
    seed: int = Field(description="Their seed")


class EvaluationReport(Answer):
    """What the grader made of every answer held."""

    mean_score: Number | None = Field(description="Mean score over scored examples; null when none was scored")
    exact_match_rate: Number | None = Field(description="Share of scored examples scoring 1.0; null when none")
    per_field_accuracy: list[FieldAccuracy] = Field(description="Accuracy of each field, worst first")
    scored: int = Field(description="Examples the grader scored")
    unscored: int = Field(description="Examples the grader left unscored")
    sampling: SamplingReport | None = Field(default=None, description="A sampling evaluation's spread; null for "
                                                                      "greedy answers")


class Evaluation(Answer):
    """An evaluation: a model answering a dataset's prompts, graded."""

    evaluation_id: str = Field(description="The evaluation's id")
    project: str = Field(description="The project it counts for")
    model: str = Field(description="The model evaluated, as resolved: NS/NAME:vN or a base model's entry id")
    base_model: BaseModelPin = Field(description="The base model and commit it answers with")
    dataset: DatasetPin = Field(description="The dataset version whose prompts it answers")
    grader: str = Field(description="json-label-match, http:URL, model:REF (a judge model) or "
                                    "bundle:NS/NAME:vN#MODULE:FUNCTION (a scoring bundle's function, its version "
                                    "resolved at submission)")
    grader_instructions: str | None = Field(description="A judge model's instructions; null for other graders")
    device_profile: str = Field(description="Device profile it runs on")
    sampling: Sampling | None = Field(default=None, description="Several sampled answers per prompt; null: one "
                                                                "greedy answer")
    rows: int | None = Field(default=None, description="The first rows asked; null: every row")
    phase: str = Field(description="QUEUED, RUNNING, COMPLETED, FAILED or CANCELLED")
    attempt: int = Field(description="Attempts started")
    devices_held: list[str] = Field(description="Devices it holds while RUNNING")
    progress: EvaluationProgress = Field(description="Rows answered of the total")
    count: Count | None = Field(default=None, description="How far it is: answers done of total (the same words for "
                                                          "every kind)")
    report: EvaluationReport | None = Field(description="The scores once COMPLETED; null before")
    failure_reason: str | None = Field(description="Why it failed; null unless FAILED")
    created_at: str = Field(description="When it was started (ISO 8601, UTC)")
    finished_at: str | None = Field(description="When it ended (ISO 8601, UTC); null while it has not")
    terminal: bool = Field(description="Whether it has ended")
    settled: bool = Field(description="Whether nothing changes any more (the same as terminal)")
    waiting_for: str | None = Field(default=None, description="What a QUEUED evaluation waits for, in words; null "
                                                              "otherwise (one evaluation's answer and its events)")


class EvaluationListItem(Evaluation):
    project_archived: bool = Field(description="Whether the evaluation's project is archived")


class EvaluationList(Answer):
    evaluations: list[EvaluationListItem] = Field(description="Evaluations, newest first (at most 500)")


class Prediction(Answer):
    """One answer, what it was answered from and its grade."""

    line: int = Field(description="The dataset line it answers, from 1")
    prompt: str = Field(description="The prompt as rendered")
    expected: str = Field(description="The dataset's answer")
    answer: str = Field(description="The model's answer")
    score: Number | None = Field(description="The grader's score, 0 to 1; null when it could not score it")
    explanation: str | None = Field(description="The grader's explanation")
    fields: dict[str, Any] | None = Field(description="Per-field verdicts, by path")
    samples: list[dict[str, Any]] | None = Field(default=None, description="A sampling evaluation's answers to the "
                                                 "row (answer, score, explanation, fields); the first is the one above "
                                                 "and the row's score is their mean")
    chat_template_sha256: str = Field(description="The chat template the prompt was rendered with")
    base_model_revision: str = Field(description="The base model commit that answered")


class Predictions(Answer):
    evaluation_id: str = Field(description="The evaluation's id")
    predictions: list[Prediction] = Field(description="Answers by line (the first `limit` with ?limit=)")
