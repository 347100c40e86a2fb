"""The one error hierarchy: every refusal carries a stable code, an HTTP status, a message and a hint.

The API renders these as RFC 9457 problem details; the CLI prints the message and exits non-zero.
Messages say what is wrong and name the row, field or reference; hints say what to change.
"""

from __future__ import annotations

from typing import Any


class PlatformError(Exception):
    """Base of every error the platform reports to a user."""

    code = "error"
    status = 400
    title = "Request refused"

    def __init__(self, message: str, *, hint: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details = details

    def to_problem(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "type": f"https://optimize.dev/problems/{self.code}",
            "title": self.title,
            "status": self.status,
            "code": self.code,
            "detail": self.message,
        }
        if self.hint:
            body["hint"] = self.hint
        body.update(self.details)
        return body


class Invalid(PlatformError):
    """The request or its content breaks a rule (a field, a row, a reference)."""

    code = "invalid"
    status = 422
    title = "Invalid input"


class Refused(PlatformError):
    """The request is well formed but the current state does not allow it."""

    code = "refused"
    status = 400
    title = "Refused"


class NotFound(PlatformError):
    code = "not_found"
    status = 404
    title = "Not found"


class Conflict(PlatformError):
    code = "conflict"
    status = 409
    title = "Conflict"


class Gone(PlatformError):
    code = "gone"
    status = 410
    title = "Gone"


class TooLarge(PlatformError):
    code = "too_large"
    status = 413
    title = "Too large"


class StorageFull(PlatformError):
    code = "storage_full"
    status = 507
    title = "Storage full"


class Unavailable(PlatformError):
    code = "unavailable"
    status = 503
    title = "Unavailable"


class ParamError(ValueError):
    """A value of an OpenAI request's parameter that the work cannot take, said in a sentence; `param` names the
    parameter, as OpenAI's error object does (an endpoint's worker answers it 400). Below the platform's errors:
    raised where a request is read or shaped, far from any route."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class ChecksumMismatch(Invalid):
    """Bytes received do not hash to the digest the sender promised."""

    code = "checksum_mismatch"


class Corrupt(Gone):
    """Stored bytes no longer hash to their name: the copy is set aside (quarantined) and counts as not held."""

    code = "corrupt"


class LeaseLost(Conflict):
    """A worker wrote to work it no longer holds; it must stop without writing more."""

    code = "lease_lost"


class Unauthenticated(PlatformError):
    """No valid API token came with the request."""

    code = "unauthenticated"
    status = 401
    title = "Unauthenticated"


class Forbidden(PlatformError):
    """The token is valid but its role or scope does not allow the request."""

    code = "forbidden"
    status = 403
    title = "Forbidden"


class TooMany(PlatformError):
    """A quota or a cap is used up: the message names it and what holds it."""

    code = "too_many"
    status = 429
    title = "Too many"
