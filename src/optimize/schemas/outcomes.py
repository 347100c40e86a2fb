"""A worker's last word on its job (`POST /v1/internal/jobs/{kind}/{id}/result`): how the job ended, an `Outcome`,
and what that ending brings, one model per kind. The worker builds it and sends `wire()`; the kind's handler on the
server reads it with `read()` at the door. No reader learns how a job ended by looking for a key.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from optimize.core.errors import Invalid

MOST_REASON = 4000  # characters of a failure's reason kept on the job


class Outcome(StrEnum):
    COMPLETED = "completed"  # the work is done; the last word holds what it brings
    FAILED = "failed"  # `reason` says why
    PAUSED = "paused"  # a run stopped for the pause it was asked for


class LastWord(BaseModel):
    """The last word of a job whose ending brings nothing but its outcome (evaluations, distillations, endpoints);
    the base of the others."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    outcome: Outcome = Field(default=Outcome.COMPLETED, description="How the job ended")
    reason: str | None = Field(default=None, description="Why it failed (failed only)")
    refused: bool = Field(default=False, description="Whether it failed because its input is refused, so another "
                                                     "attempt would fail the same way (failed only)")

    @model_validator(mode="after")
    def _reason_with_failure(self) -> Self:
        if (self.outcome is Outcome.FAILED) != (self.reason is not None):
            raise ValueError("a failed last word gives its reason, and only a failed one")
        return self

    @classmethod
    def failure(cls, reason: str, refused: bool = False) -> Self:
        return cls(outcome=Outcome.FAILED, reason=reason or "the worker failed without saying why", refused=refused)

    @classmethod
    def read(cls, body: Any) -> Self:
        """The last word a worker sent (Invalid, naming what is wrong, for one that is not)."""
        return _read(cls, body, "last word")

    def wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    @property
    def failed(self) -> bool:
        return self.outcome is Outcome.FAILED

    def failure_reason(self) -> str:
        return (self.reason or "")[:MOST_REASON]


class AnalysisLastWord(LastWord):
    report: dict[str, Any] | None = Field(default=None, description="What it measured (completed only)")
    lengths_sha256: str | None = Field(default=None, description="The per-row lengths file it uploaded")

    @model_validator(mode="after")
    def _report_when_completed(self) -> Self:
        if self.outcome is Outcome.COMPLETED and self.report is None:
            raise ValueError("a completed analysis brings its report")
        return self


class RunProgress(BaseModel):
    """A run's worker's report while it works (POST …/progress), merged from what it queued since the last one."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    progress: dict[str, Any] = Field(default_factory=dict, description="Rows done of total while preparing; the "
                                                                        "update, loss and save counts while training")
    training: bool = Field(default=False, description="It trains now (the first such report moves it to TRAINING)")
    checks: dict[str, Any] | None = Field(default=None, description="What its start checks found")
    data_fit: dict[str, Any] | None = Field(default=None, description="How its rows fit maxSeqLength")
    smoke: dict[str, Any] | None = Field(default=None, description="Its smoke check's outcome")
    plan_pause: int | None = Field(default=None, ge=1, description="It stops at this update, its plan's "
                                                                   "execution.pauseAtStep")

    @classmethod
    def read(cls, body: Any) -> Self:
        """The report a worker sent (Invalid, naming what is wrong, for one that is not)."""
        return _read(cls, body, "progress report")


class RunPause(BaseModel):
    """Where a run's worker stopped for its pause."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    step: int | None = Field(default=None, description="The update it stopped at (null: before its first)")
    save_error: str | None = Field(default=None, description="Why the save it was asked for was not committed")


class RunLastWord(LastWord):
    paused: RunPause | None = Field(default=None, description="Where it stopped (paused only)")
    modules: list[str] | None = Field(default=None, description="The modules its adapter adapts (completed)")
    weights_digest: str | None = Field(default=None, description="Its adapter weights' digest (completed)")
    results: dict[str, Any] | None = Field(default=None, description="Its results: losses, steps, tokens, …")
    cost: dict[str, Any] | None = Field(default=None, description="Its cost: training seconds, tokens/s, …")

    @model_validator(mode="after")
    def _paused_when_pausing(self) -> Self:
        if (self.outcome is Outcome.PAUSED) != (self.paused is not None):
            raise ValueError("a paused last word says where it stopped, and only a paused one")
        return self

    @classmethod
    def pause(cls, step: int | None, save_error: str | None = None) -> Self:
        return cls(outcome=Outcome.PAUSED, paused=RunPause(step=step, save_error=save_error))


M = TypeVar("M", bound=BaseModel)


def _read(model: type[M], body: Any, what: str) -> M:
    try:
        return model.model_validate(body if body is not None else {})
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}"
                             for e in error.errors()[:5])
        raise Invalid(f"the worker's {what} is not valid: {problems}") from None
