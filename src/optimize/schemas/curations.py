"""Curations: `/v1/training/curations` (apply, read, list, cancel, rejections) and the worker's spec.

A curation request is the document `akka training curations apply -f FILE` reads (YAML or JSON) and the body of
`POST /v1/training/curations`: each field is refused in its own words, an unknown one by name, before anything is
looked up."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import ConfigDict, Field

from optimize.schemas.common import Answer, BaseModelPin, Number
from optimize.schemas.jobs import BaseModelSpec, Spec
from optimize.schemas.progress import Count
from optimize.schemas.requests import Refusal, RequestModel

# --- requests ----------------------------------------------------------------------------------------------

MOST_INSTRUCTIONS_CHARS = 32_768  # what the judge is told, sent with every candidate: a brief, not a document
MOST_SESSIONS = 100
CURATION_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
SESSION_HASH = r"^(sha256:)?[0-9a-fA-F]{64}$"


class CurationRequest(RequestModel):
    """`POST /v1/training/curations`, and the file `curations apply -f` reads."""

    model_config = ConfigDict(extra="forbid")
    not_an_object: ClassVar[Refusal] = Refusal(
        "a curation request is one object with sessionHashes, judge, instructions, threshold and dataset")

    curation_id: Annotated[str | None, Refusal(
        "curationId must be 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit",
        hint="e.g. curationId: triage-curation-1")] = Field(
        default=None, pattern=CURATION_ID, description="Idempotency key: the same curationId reaches the same "
                                                       "curation (the CLI makes one when the file has none)")
    project: Annotated[str | None, Refusal("project must be a name (a string)")] = Field(
        default=None, pattern=r"\S", description="The training project it counts for (default: the token's one "
                                                 "project)")
    session_hashes: Annotated[list[Annotated[str, Field(pattern=SESSION_HASH)]], Refusal(
        f"sessionHashes must be a list of 1 to {MOST_SESSIONS} session hashes (64 hex digits each)",
        hint="sessions create prints a session's hash",
        missing="a curation needs sessionHashes: the sessions whose candidates it judges")] = Field(
        min_length=1, max_length=MOST_SESSIONS, description="The sessions whose candidates are judged, of the "
                                                            "curation's project")
    source: Annotated[str | None, Refusal("source must be oasst1, otel or canonical")] = Field(
        default=None, pattern=r"^(oasst1|otel|canonical)$", description="Optional: the format every session "
                                                                       "named must have come from")
    judge: Annotated[str, Refusal("judge must be a model: a base model, a registered model NS/NAME[:vN|:ALIAS], or "
                                  "endpoint:MODEL (a model an endpoint serves)",
                                  missing="a curation needs judge: the model that scores each candidate")] = Field(
        pattern=r"\S", description="The judging model: a base model or a registered model NS/NAME[:vN|:ALIAS], "
                                   "loaded by the curation's worker on a device of its own; or endpoint:MODEL, a "
                                   "model an endpoint serves now, asked there (the curation holds no device)")
    instructions: Annotated[str, Refusal(
        f"instructions must be text of 1 to {MOST_INSTRUCTIONS_CHARS:,} characters: how the judge decides what "
        "to keep", missing="a curation needs instructions: how the judge decides what to keep")] = Field(
        min_length=1, max_length=MOST_INSTRUCTIONS_CHARS, pattern=r"\S",
        description="How the judge decides: its system message, before the reply form every judge is asked for")
    threshold: Annotated[float, Refusal(
        "threshold must be a number from 0 to 1: the judge's score a candidate needs to be kept",
        missing="a curation needs threshold: the judge's score (0 to 1) a candidate needs to be kept")] = Field(
        ge=0, le=1, description="The judge's score (0 to 1) a candidate needs to be kept")
    dataset: Annotated[str, Refusal("dataset must be a chat dataset NS/NAME",
                                    missing="a curation needs dataset: the chat dataset NS/NAME the kept "
                                            "candidates register as a version of")] = Field(
        pattern=r"\S", description="The chat dataset NS/NAME the kept candidates are registered under, as its next "
                                   "version")
    system_prompt: Annotated[str | None, Refusal(
        f"systemPrompt must be text of 1 to {MOST_INSTRUCTIONS_CHARS:,} characters")] = Field(
        default=None, min_length=1, max_length=MOST_INSTRUCTIONS_CHARS,
        description="A system message put first on every kept row (in place of a candidate's own)")
    device_profile: Annotated[str | None, Refusal("deviceProfile must be a name (a string)")] = Field(
        default=None, description="The device profile the judge runs on (default cpu)")


# --- answers ------------------------------------------------------------------------------------------------


class CurationSession(Answer):
    session_hash: str = Field(description="The session's hash")
    source: str = Field(description="oasst1, otel or canonical")
    candidates: int = Field(description="Candidates it holds")


class CurationJudge(Answer):
    reference: str = Field(description="The judge as resolved: NS/NAME:vN or a base model's entry id")
    base_model: BaseModelPin = Field(description="The judge's base model and commit")
    endpoint: bool = Field(default=False, description="Whether it is asked where an endpoint serves it (judge "
                                                      "endpoint:MODEL) rather than loaded by the curation's worker")


class CurationProgress(Answer):
    total: int = Field(description="Candidates in all its sessions")
    judged: int = Field(description="Candidates judged so far (saved chunks of earlier attempts included)")
    kept: int = Field(description="Candidates kept: scored at the threshold or more")
    rejected: int = Field(description="Candidates rejected")
    rejected_by_reason: dict[str, int] = Field(description="Rejected candidates by reason")


class RegisteredVersion(Answer):
    reference: str = Field(description="The dataset version registered, NS/NAME:vN")
    digest: str = Field(description="Its content digest")
    rows: int = Field(description="Rows it holds")


class Curation(Answer):
    """A curation: a judge model scoring a project's session candidates; the kept ones become a dataset version."""

    curation_id: str = Field(description="The curation's id")
    key: str = Field(description="The request's curationId (made when the request had none): the same one reaches "
                                 "this curation")
    project: str = Field(description="The project it counts for")
    sessions: list[CurationSession] = Field(description="The sessions judged, in order")
    judge: CurationJudge = Field(description="The judging model and its commit")
    instructions: str = Field(description="How the judge decides")
    instructions_sha256: str = Field(description="The sha256 of the instructions, as the version's lineage names "
                                                 "them")
    threshold: Number = Field(description="The judge's score a candidate needs to be kept")
    system_prompt: str | None = Field(description="The system message put first on every kept row; null: none")
    dataset: str = Field(description="NS/NAME the kept candidates are registered under")
    device_profile: str = Field(description="Device profile the judge runs on")
    phase: str = Field(description="QUEUED, RUNNING, ASSEMBLING, COMPLETED, FAILED or CANCELLED")
    attempt: int = Field(description="Attempts started")
    devices_held: list[str] = Field(description="Devices it holds while RUNNING")
    progress: CurationProgress = Field(description="Candidates judged, kept and rejected")
    count: Count | None = Field(default=None, description="How far it is: candidates judged of total and kept (the "
                                                          "same words for every kind)")
    registered: RegisteredVersion | None = Field(description="The dataset version registered once COMPLETED")
    failure_reason: str | None = Field(description="Why it failed; null unless FAILED")
    created_at: str = Field(description="When it was created (ISO 8601, UTC)")
    finished_at: str | None = Field(description="When it ended (ISO 8601, UTC); null while it has not")
    terminal: bool = Field(description="Whether it has ended")
    settled: bool = Field(description="Whether nothing changes any more")
    waiting_for: str | None = Field(default=None, description="What a QUEUED curation waits for, in words")


class CurationListItem(Curation):
    project_archived: bool = Field(description="Whether the curation's project is archived")


class CurationList(Answer):
    curations: list[CurationListItem] = Field(description="Curations, newest first (at most 500)")


class CurationRejection(Answer):
    position: int = Field(description="The candidate's place across the curation's sessions (zero-based)")
    candidate: str = Field(description="The candidate's id in its source")
    session_hash: str = Field(description="The session it came from")
    reason: str = Field(description="Why it was rejected: below_threshold, unscored or prompt_too_long")
    score: Number | None = Field(description="The judge's score; null when it gave none")
    detail: str | None = Field(description="What exactly: the score against the threshold, or why it is unscored")
    output: str = Field(description="The judge's reply as generated")


class CurationRejections(Answer):
    curation_id: str = Field(description="The curation's id")
    rejected_by_reason: dict[str, int] = Field(description="Rejected candidates by reason")
    rejections: list[CurationRejection] = Field(description="Rejected candidates in order (the first `limit`)")


# --- the worker's spec ---------------------------------------------------------------------------------------


class CurationSessionSpec(Spec):
    session_hash: str = Field(description="The session's hash: its candidates' blob, read through the lease")
    candidates: int = Field(description="Candidates it holds")


class CurationJobSpec(Spec):
    """A curation worker's spec: the sessions to read, the judge to load, how it is asked and what is kept."""

    curation_id: str = Field(description="The curation")
    lease_seconds: float = Field(description="How long the lease holds without a heartbeat")
    sessions: list[CurationSessionSpec] = Field(description="The sessions, in order")
    model: BaseModelSpec = Field(description="The judge's base model")
    judge_reference: str = Field(description="The judge as resolved (named in its unscored verdicts)")
    judge_endpoint: bool = Field(default=False, description="Ask the judge through the server, where an endpoint "
                                                            "serves it (`judge` action), instead of loading it")
    adapter_manifest: str | None = Field(description="The judge adapter's weights manifest, for an adapter")
    max_model_length: int | None = Field(description="Most tokens of a prompt and its reply (the judge's context)")
    instructions: str = Field(description="How the judge decides")
    threshold: float = Field(description="The score a candidate needs to be kept")
    judged: list[int] = Field(description="Positions whose verdicts are saved already (not judged again)")
