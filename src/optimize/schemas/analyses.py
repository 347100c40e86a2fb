"""Dataset analyses: `/v1/training/datasets/analyses`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from optimize.schemas.common import Answer, Number
from optimize.schemas.progress import Count


class AnalysisRequest(BaseModel):
    """`POST /v1/training/datasets/analyses`."""

    model_config = ConfigDict(extra="forbid")
    dataset: str = Field(description="Dataset reference NS/NAME[:vN|:ALIAS|@sha256:HEX]")
    model: str | None = Field(default=None, description="Base model: entry id, repository or unambiguous prefix "
                              "(default: the plan's baseModel)")
    plan: dict[str, Any] | None = Field(default=None,
                                        description="A run plan (kind: run) to estimate steps and time for")


class Analysis(Answer):
    """An analysis of a dataset version's examples under a base model's tokenizer and template; one is kept for
    each (examples, base model commit, Optimize version)."""

    analysis_id: str = Field(description="The analysis's id")
    phase: str = Field(description="pending, running, done or failed")
    attempt: int = Field(description="Attempts started")
    dataset: str = Field(description="The dataset version analyzed: NS/NAME:vN")
    examples_digest: str = Field(description="sha256:HEX of the examples' bytes in order, whatever shards hold them "
                                             "(shared by names and versions holding the same examples)")
    kind: str = Field(description="chat or preference")
    base_model: str = Field(description="The base model's catalog entry id")
    base_model_commit: str = Field(description="The base model commit whose tokenizer and template were used")
    optimize_version: str = Field(description="The Optimize version that analyzed")
    reason: str | None = Field(description="Why it failed; null unless failed")
    refused: bool = Field(description="Whether it failed because a row cannot be measured (named by its line), so "
                                      "another attempt would fail the same way and none is started")
    created_at: str = Field(description="When it was requested (ISO 8601, UTC)")
    started_at: str | None = Field(description="When its worker started (ISO 8601, UTC)")
    finished_at: str | None = Field(description="When it ended (ISO 8601, UTC)")
    report: dict[str, Any] | None = Field(description="What it measured: rows, token lengths, templates, tools; "
                                                      "null until done")
    progress: dict[str, Any] = Field(default_factory=dict, description="rowsMeasured of rowsTotal, as its worker "
                                                                       "reported them (empty before it starts)")
    count: Count | None = Field(default=None, description="How far it is: rows measured of total (the same words "
                                                          "for every kind); null before it starts")
    terminal: bool = Field(description="Whether it has ended (done or failed)")
    settled: bool = Field(description="Whether nothing more will change (as terminal: an analysis is not retried)")
    row_lengths: str | None = Field(default=None, description="sha256:HEX of the per-row lengths file (once done)")
    estimates: dict[str, Any] | None = Field(default=None, description=(
        "Steps and time for the plan given (POST with a plan, once done); `seconds` scaled by how fast runs of the "
        "plan's shape trained on this deployment where any completed, `unscaledSeconds` the catalog's figure and "
        "`scale` an EstimateScale (null when unscaled)"))


class EstimateScale(Answer):
    """The factor a time estimate was scaled by: runs of the same shape here (base model, method, device profile
    and devices, maxSeqLength and sequences an update within a factor of 2) measured against their estimates."""

    factor: Number = Field(description="Measured over predicted throughput, the median of the runs (below 1: slower "
                                       "than the catalog's measurement); the estimate's seconds are divided by it")
    runs: list[str] = Field(description="The completed runs it was measured on, newest first (at most 5)")
    basis: str = Field(description="Where the factor came from, in words")


class AnalysisList(Answer):
    analyses: list[Analysis] = Field(description="Analyses kept for the examples the reference resolves to, newest "
                                                 "first")


class LengthBin(Answer):
    from_: int = Field(alias="from", description="Shortest length in the bin (tokens)")
    to: int = Field(description="Longest length in the bin (tokens)")
    rows: int = Field(description="Rows (or pairs) whose length falls in it")


class LimitCount(Answer):
    limit: int = Field(description="A common maxSeqLength")
    over: int = Field(description="Rows longer than it")


class LengthHistogram(Answer):
    """`GET /v1/training/datasets/analyses/{id}/histogram`: the rows' token lengths under the analysis' base model."""

    analysis_id: str = Field(description="The analysis's id")
    bins: list[LengthBin] = Field(description="Equal-width bins from 1 token to the longest row")
    rows: int = Field(description="Rows (or pairs) counted")
    longest: int = Field(description="The longest row, tokens")
    width: int = Field(description="Tokens each bin spans")
    limits: list[LimitCount] = Field(description="The common maxSeqLength limits below the longest row, and the first "
                                                 "one it fits, with the rows over each")
