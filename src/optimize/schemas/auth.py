"""API tokens: `/v1/auth/tokens` (issue, list, revoke; administrators) and `/v1/auth/whoami`."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from optimize.schemas.common import Answer

# --- requests ----------------------------------------------------------------------------------------------


class TokenCreate(BaseModel):
    """`POST /v1/auth/tokens`: a new token with a role, optionally limited to projects and namespaces."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=64, description="A name for the token (who or what uses it)")
    role: Literal["reader", "trainer", "admin"] = Field(description="reader reads; trainer also starts and changes "
                                                                    "work and data; admin also manages tokens and "
                                                                    "the deployment's models")
    projects: list[str] | None = Field(default=None, max_length=100,
                                       description="Projects the token is limited to (default: all)")
    namespaces: list[str] | None = Field(default=None, max_length=100,
                                         description="Registry namespaces the token is limited to (default: all)")


# --- answers ------------------------------------------------------------------------------------------------


class WhoAmI(Answer):
    """The caller a request's token names."""

    token_id: str = Field(description="The token's id")
    name: str = Field(description="Its name")
    role: str = Field(description="reader, trainer or admin")
    projects: list[str] | None = Field(description="Projects it is limited to; null: all")
    namespaces: list[str] | None = Field(description="Namespaces it is limited to; null: all")


class Token(WhoAmI):
    """A token's record (never the token itself, which only its creation answers)."""

    created_at: str = Field(description="When it was issued (ISO 8601, UTC)")
    created_by: str | None = Field(description="The id of the token that issued it; null: the server, at its "
                                               "first start")
    last_used_at: str | None = Field(description="When it was last used (to the minute); null: never")
    revoked_at: str | None = Field(description="When it was revoked; null: it works")


class IssuedToken(Token):
    """A new token: `token` is shown here once and never again."""

    token: str = Field(description="The token: send it as Authorization: Bearer TOKEN; shown once")


class TokenList(Answer):
    tokens: list[Token] = Field(description="The tokens, oldest first")
