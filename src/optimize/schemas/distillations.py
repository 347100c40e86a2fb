"""Distillations: `/v1/training/distillations` (create, read, list, pause, resume, cancel, rejections)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Self

from pydantic import ConfigDict, Field, model_validator

from optimize.core.acceptance import DEFAULT_FLOOR
from optimize.core.errors import Invalid
from optimize.schemas.common import AcceptanceRate, Answer, BaseModelPin, DatasetPin, Number
from optimize.schemas.jobs import DistillationSettingsSpec, DistillationSpec
from optimize.schemas.progress import Count
from optimize.schemas.requests import Refusal, RequestModel

# --- requests ----------------------------------------------------------------------------------------------


MOST_INSTRUCTIONS_CHARS = 32_768  # a system prompt, not a document: kept in the settings, sent with every prompt
FLOOR_REFUSAL = Refusal("acceptanceFloor must be a number from 0 to 1 (the share of answers accepted below which it "
                        "warns)")


def _needs(field: str, what: str) -> Refusal:
    return Refusal(f"a distillation needs {field} ({what})")


class DistillationRequest(RequestModel):
    """`POST /v1/training/distillations`."""

    model_config = ConfigDict(extra="forbid")
    not_an_object: ClassVar[Refusal] = Refusal("a distillation needs teacher, source and target")

    teacher: Annotated[str, _needs("teacher", "a base model or a registered model NS/NAME[:vN]")] = Field(
        pattern=r"\S", description="The teacher: a base model (serving-only models included) or a registered model "
                                   "NS/NAME[:vN|:ALIAS] (an adapter over its base)")
    source: Annotated[str, _needs("source", "a chat dataset NS/NAME[:vN|:ALIAS]")] = Field(
        pattern=r"\S", description="The chat dataset whose decisions it answers: NS/NAME[:vN|:ALIAS|@sha256:HEX]")
    target: Annotated[str, _needs("target", "NS/NAME the accepted rows are registered under")] = Field(
        pattern=r"\S", description="NS/NAME the accepted rows are registered under, as its next version")
    project: Annotated[str | None, Refusal("project must be a name (a string)")] = Field(
        default=None, description="The project it counts for (a registered teacher's own; needed for a base model)")
    device_profile: Annotated[str | None, Refusal("deviceProfile must be a name (a string)")] = Field(
        default=None, description="The device profile it answers on (default: where the catalog serves the "
                                  "teacher, else cpu)")
    replicas: Annotated[int, Refusal("replicas must be an integer from 1 to 8")] = Field(
        default=1, ge=1, le=8, description="Devices answering at once, one a replica")
    max_tokens: Annotated[int, Refusal("maxTokens must be an integer from 1 to 32768")] = Field(
        default=4096, ge=1, le=32768, description="Most tokens of one answer")
    max_model_length: Annotated[int, Refusal("maxModelLength must be an integer from 16 to 10000000")] = Field(
        default=65536, ge=16, le=10**7, description="Most tokens of a prompt and its answer")
    seed: Annotated[int, Refusal("seed must be an integer from 0 to 4294967295")] = Field(
        default=0, ge=0, le=2**32 - 1, description="Seed of the sampled answers")
    temperature: Annotated[float, Refusal("temperature must be a number from 0 to 2")] = Field(
        default=1.0, ge=0, le=2, description="Sampling temperature (0: greedy)")
    top_p: Annotated[float, Refusal("topP must be a number from 0 to 1 (above 0)")] = Field(
        default=1.0, gt=0, le=1, description="Nucleus sampling's probability mass")
    thinking: Annotated[bool, Refusal("thinking must be true or false (--thinking on|off)")] = Field(
        default=False, description="Let a Gemma 4 teacher think (its reasoning is stripped from the rows)")
    acceptance_floor: Annotated[float, FLOOR_REFUSAL] = Field(
        default=DEFAULT_FLOOR, ge=0, le=1, description="The acceptance rate below which it warns (0: never), judged "
                                                       "once 20 decisions are decided")
    smoke: Annotated[str | None, Refusal("smoke must be a string of ROW:MESSAGE decisions, e.g. 0:1,3:1")] = Field(
        default=None, description="The smoke's decisions ROW:MESSAGE,... (zero-based; all must be accepted); "
                                  "default: the first 16, all but one accepted")
    instructions: Annotated[str | None, Refusal(
        f"instructions must be text of 1 to {MOST_INSTRUCTIONS_CHARS:,} characters (the teacher's system prompt)",
        hint="put a longer brief in the source rows' own system messages")] = Field(
        default=None, min_length=1, max_length=MOST_INSTRUCTIONS_CHARS,
        description="The teacher's system prompt: each decision is asked with it in place of the row's own system "
                    "message; the registered rows keep the row's history")
    accept_grader: Annotated[str | None, Refusal("acceptGrader must be a grader (a string), e.g. exact or "
                                                 "bundle:NS/NAME#MODULE")] = Field(
        default=None, pattern=r"\S", description="A grader each accepted answer is also scored by against the "
                                                 "decision's own assistant message (as an evaluation's grader); "
                                                 "with minScore")
    min_score: Annotated[float | None, Refusal("minScore must be a number from 0 to 1 (the least score the "
                                               "acceptance grader may give an answer kept)")] = Field(
        default=None, ge=0, le=1, description="The least score an answer may have from acceptGrader; one below it, "
                                              "or unscored, is rejected (below_min_score)")

    response_schema: Annotated[dict[str, Any] | None, Refusal("responseSchema must be a JSON schema (an object)")] = \
        Field(default=None, description="A JSON schema every answer of the teacher keeps to (constrained decoding)")
    submission_id: Annotated[str | None, Refusal("submissionId must be a string of 1 to 128 characters")] = Field(
        default=None, min_length=1, max_length=128, description="Idempotency key: the same request under the same "
                                                                 "id reaches the same distillation")

    @model_validator(mode="after")
    def _grader_with_its_score(self) -> Self:
        """An acceptance grader and its least score come together: one without the other says nothing."""
        if (self.accept_grader is None) != (self.min_score is None):
            grader, score = "acceptGrader (--accept-grader)", "minScore (--min-score)"
            given, missing = (grader, score) if self.min_score is None else (score, grader)
            raise Invalid(f"{given} needs {missing}: an answer is scored by the grader and kept at the least score",
                          hint="pass both, e.g. --accept-grader exact --min-score 1, or neither")
        return self


# --- answers ------------------------------------------------------------------------------------------------


class DistillationSettings(Answer):
    replicas: int = Field(description="Devices answering at once")
    max_tokens: int = Field(description="Most tokens of one answer")
    max_model_length: int = Field(description="Most tokens of a prompt and its answer")
    temperature: Number = Field(description="Sampling temperature")
    top_p: Number = Field(description="Nucleus sampling's probability mass")
    seed: int = Field(description="Seed of the sampled answers")
    smoke: list[str] | None = Field(description="The smoke's named decisions; null: the first 16")
    thinking: bool = Field(description="Whether a Gemma 4 teacher thinks")
    acceptance_floor: Number = Field(default=0.2, description="The acceptance rate below which it warns")
    instructions: str | None = Field(default=None, description="The teacher's system prompt; null: the rows' own")
    accept_grader: str | None = Field(default=None, description="The grader accepted answers are also scored by "
                                                                "(a bundle's at its exact version); null: none")
    min_score: Number | None = Field(default=None, description="The least score from acceptGrader an answer kept "
                                                               "has; null without a grader")
    response_schema: dict[str, Any] | None = Field(default=None, description="The JSON schema every answer keeps "
                                                                             "to; null: free answers")


class DistillationProgress(Answer):
    decisions: int = Field(description="Decisions in the source (assistant messages of its rows)")
    answered: int = Field(description="Decisions answered so far (saved chunks of earlier attempts included)")
    accepted: int = Field(description="Answers accepted")
    rejected: int = Field(description="Answers rejected")
    rejected_by_reason: dict[str, int] = Field(description="Rejected answers by reason")


class DistillationSmoke(Answer):
    decisions: list[str] = Field(description="The smoke's decisions, ROW:MESSAGE")
    accepted: int = Field(description="Of them accepted")
    passed: bool | None = Field(description="Whether it passed; null until it has been judged")
    failed: list[str] = Field(description="The decisions it failed on")


class RegisteredDataset(Answer):
    reference: str = Field(description="The dataset version registered, NS/NAME:vN")
    digest: str = Field(description="Its content digest")
    rows: int = Field(description="Rows it holds")


class Distillation(Answer):
    """A distillation: a teacher answering a chat dataset's decisions; accepted answers become a dataset version."""

    distillation_id: str = Field(description="The distillation's id")
    project: str = Field(description="The project it counts for")
    teacher: str = Field(description="The teacher, as resolved: NS/NAME:vN or a base model's entry id")
    base_model: BaseModelPin = Field(description="The teacher's base model and commit")
    source: DatasetPin = Field(description="The source dataset version")
    target: str = Field(description="NS/NAME the accepted rows are registered under")
    settings: DistillationSettings = Field(description="Its settings, defaults filled in")
    device_profile: str = Field(description="Device profile it answers on")
    phase: str = Field(description="QUEUED, RUNNING, PAUSED, ASSEMBLING, COMPLETED, FAILED or CANCELLED")
    stage: str | None = Field(description="While RUNNING: smoke or answering; null otherwise")
    attempt: int = Field(description="Attempts started")
    devices_held: list[str] = Field(description="Devices it holds while RUNNING")
    progress: DistillationProgress = Field(description="Decisions answered, accepted and rejected")
    count: Count | None = Field(default=None, description="How far it is: decisions answered of total and answers "
                                                          "accepted (the same words for every kind); null until "
                                                          "its worker has read the source")
    acceptance: AcceptanceRate = Field(description="Answers accepted over answers decided, against the floor")
    warnings: list[str] = Field(default_factory=list, description="What to look at: an acceptance rate below the "
                                                                  "floor (also recorded as a `warning` event)")
    smoke: DistillationSmoke | None = Field(description="The smoke check; null before it starts")
    registered: RegisteredDataset | None = Field(description="The dataset version registered once COMPLETED")
    failure_reason: str | None = Field(description="Why it failed; null unless FAILED")
    created_at: str = Field(description="When it was created (ISO 8601, UTC)")
    finished_at: str | None = Field(description="When it ended (ISO 8601, UTC); null while it has not")
    terminal: bool = Field(description="Whether it has ended")
    settled: bool = Field(description="Whether nothing changes any more (ended, or PAUSED)")
    waiting_for: str | None = Field(default=None, description="What a QUEUED distillation waits for, in words")


class DistillationListItem(Distillation):
    project_archived: bool = Field(description="Whether the distillation's project is archived")


class DistillationList(Answer):
    distillations: list[DistillationListItem] = Field(description="Distillations, newest first (at most 500)")


class Rejection(Answer):
    decision: str = Field(description="The decision, ROW:MESSAGE (zero-based)")
    reason: str = Field(description="Why it was rejected: empty, max_tokens, unreadable_tool_call, unknown_tool, "
                                    "arguments_not_object, row_refused, template_refused, prompt_too_long or "
                                    "below_min_score")
    detail: str | None = Field(description="What exactly, where there is more to say")
    output: str = Field(description="The teacher's answer as generated")


class Rejections(Answer):
    distillation_id: str = Field(description="The distillation's id")
    rejected_by_reason: dict[str, int] = Field(description="Rejected answers by reason")
    rejections: list[Rejection] = Field(description="Rejected answers by decision (the first `limit`)")


# --- the worker's spec ---------------------------------------------------------------------------------------


class DistillationJobSettings(DistillationSettingsSpec):
    instructions: str | None = Field(default=None, description="The teacher's system prompt, in place of a row's")
    accept_grader: str | None = Field(default=None, description="The acceptance grader (a bundle's pinned to its "
                                                                "archive's digest); null: none")
    min_score: float | None = Field(default=None, description="The least score from the acceptance grader")


class DistillationJobSpec(DistillationSpec):
    """A distillation worker's spec: the job's, its settings with the teacher's instructions and the acceptance
    grader."""

    settings: DistillationJobSettings = Field(description="How it answers and what it keeps")
