"""What `/v1/training/sessions` answers: a session (its hash, source, project and counts), with `created` when it
was sent, and its first candidates when it is read."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from optimize.schemas.common import Answer


class Session(Answer):
    """A session: a conversation corpus parsed into candidates."""

    session_hash: str = Field(description="The session hash: the sha256 of its candidates as normalized JSON lines, "
                                          "in order (the same file gives the same hash); a curation names it")
    source: str = Field(description="The file's format: oasst1, otel or canonical")
    project: str = Field(description="The training project the session belongs to")
    records: int = Field(description="What was read: message trees (oasst1), log records or spans (otel) or "
                                     "records (canonical)")
    candidates: int = Field(description="Conversations extracted, each ending in the assistant answer a curation "
                                        "judges")
    skipped: dict[str, int] = Field(description="What was left out, by reason: deleted (oasst1 messages in deleted "
                                                "subtrees), not_gen_ai_event and error_choice (otel), incomplete "
                                                "(canonical)")
    bytes: int = Field(description="The size of the session's candidates as stored")
    created_at: str = Field(description="When the session was created (ISO 8601)")
    created_by: str | None = Field(description="The name of the token that created it")


class SessionCreated(Session):
    """A session as `POST /v1/training/sessions` answers it."""

    created: bool = Field(description="Whether this request created it (false: the project held the same content "
                                      "already, and this is that session)")


class SessionDetail(Session):
    """A session as `GET /v1/training/sessions/{hash}` answers it."""

    first_candidates: list[dict[str, Any]] = Field(
        description="Its first candidates, in order (`limit` of them): id, source, messages, tools where given, "
                    "and meta (what the source said about the answer)")
