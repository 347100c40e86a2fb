"""The record of a dataset conversion: how a file in another format became a version's rows."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class ConversionRule(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rule: str = Field(max_length=200, description="What was changed, in words (e.g. \"'functions' became 'tools'\")")
    rows: int = Field(ge=0, description="Rows the rule changed")


class Conversion(BaseModel):
    """Source format and container of the file, the rows written and the rules applied."""

    model_config = ConfigDict(extra="forbid")
    source_format: Literal["chat-jsonl-v1", "preference-jsonl-v1", "openai-chat-jsonl", "openai-preference-jsonl",
                           "trl-preference", "trl-prompt-completion"] = Field(
        alias="sourceFormat", description="The rows' format in the file")
    container: Literal["jsonl", "json-array", "parquet"] = Field(description="How the file holds its rows")
    format: Literal["chat-jsonl-v1", "preference-jsonl-v1"] = Field(description="The format registered")
    rows: int = Field(ge=0, description="Rows converted")
    rules: list[ConversionRule] = Field(max_length=50, description="The rules applied, with the rows each changed")
