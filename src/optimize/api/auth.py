"""The door: every request but the open ones carries `Authorization: Bearer TOKEN`, and the token's role allows it.

One table says which role a request needs (first match wins): reading needs a reader, changing work or data a
trainer, managing tokens and the deployment's models an admin; talking to a served model (OpenAI's routes) is
reading. Open: `/v1/health`, the API's own pages and schema, and the workers' routes (`/v1/internal/…`), which
their lease token fences instead. The check is an ASGI middleware, so it covers every route, streams included,
before any body is read. 401 names what is missing, 403 the role needed; OpenAI's routes also answer in OpenAI's
error shape, which its clients read.
"""

from __future__ import annotations

import re

from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from optimize.api.problems import send_problem
from optimize.auth.tokens import Caller, access_limits, authenticate
from optimize.core.access import limited_to
from optimize.core.server_paths import showing_server_paths
from optimize.core.tokens import Role
from optimize.store.db import Store

# the dashboard's page and assets hold no data (every read the page makes carries the user's token)
OPEN = re.compile(r"^/(|dashboard/assets/[^/]+|v1/health|docs|docs/assets/.*|redoc|openapi\.json|v1/internal/.*)$")
# OpenAI's routes (and ones its clients may try, answered 404 in its shape): errors there carry OpenAI's `error`
OPENAI_SERVING = re.compile(
    r"^/v1/(chat/completions|completions|models(/.+)?|responses|embeddings)$|/(chat/)?completions$")
# OpenAI's fine-tuning routes: reads need a reader, uploads and jobs a trainer (the rules below), errors OpenAI's shape
OPENAI = re.compile(OPENAI_SERVING.pattern + r"|^/v1/(files(/.*)?|fine_tuning/.*)$")
READS = frozenset({"GET", "HEAD", "OPTIONS"})

# (methods or None for any, path pattern, role needed): the first match decides
ACCESS: tuple[tuple[frozenset[str] | None, re.Pattern[str], Role], ...] = (
    (None, re.compile(r"^/v1/auth/tokens(/.*)?$"), Role.ADMIN),
    (None, re.compile(r"^/v1/admin/"), Role.ADMIN),
    (frozenset({"POST"}), re.compile(r"^/v1/training/base-models(/.+/select)?$"), Role.ADMIN),
    (None, OPENAI_SERVING, Role.READER),
    (READS, re.compile(r".*"), Role.READER),
    (None, re.compile(r".*"), Role.TRAINER),
)


def needed_role(method: str, path: str) -> Role:
    for methods, pattern, role in ACCESS:
        if (methods is None or method in methods) and pattern.search(path):
            return role
    return Role.ADMIN  # not reached: the table ends with a rule for everything


class TokenGate:
    """ASGI middleware: authenticates the request and checks its role; `scope["state"]["caller"]` is the caller."""

    def __init__(self, app: ASGIApp, store: Store) -> None:
        self.app = app
        self.store = store

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if OPEN.match(scope["path"]):
            with showing_server_paths(False):  # answered to anyone
                await self.app(scope, receive, send)
            return
        path, method = scope["path"], scope["method"]
        token = _bearer(scope)
        if token is None:
            await _refuse(scope, receive, send, 401, "unauthenticated", "this server needs an API token",
                          "send Authorization: Bearer TOKEN; with akka: --token, OPTIMIZE_TOKEN or akka auth login")
            return
        caller = await run_in_threadpool(authenticate, self.store, token)
        if caller is None:
            await _refuse(scope, receive, send, 401, "unauthenticated",
                          "the API token is not valid (unknown or revoked)",
                          "ask an administrator for a token: akka auth tokens create")
            return
        needed = needed_role(method, path)
        if not caller.role.allows(needed):
            await _refuse(scope, receive, send, 403, "forbidden",
                          f"{method} {path} needs the {needed.value} role; token {caller.name} is a "
                          f"{caller.role.value}", f"use a token with that role (an administrator issues one: akka auth "
                          f"tokens create NAME --role {needed.value})")
            return
        scope.setdefault("state", {})["caller"] = caller
        # what the services check and filter by, for this request; where the server keeps things, for an admin only
        with limited_to(access_limits(caller)), showing_server_paths(caller.role.allows(Role.ADMIN)):
            await self.app(scope, receive, send)


def caller_of(request) -> Caller:
    """The caller the gate let in (routes behind the gate only)."""
    return request.scope["state"]["caller"]


def _bearer(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() or None if scheme.lower() == "bearer" else None
    return None


async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, code: str, detail: str,
                  hint: str) -> None:
    extra = {}
    if OPENAI.search(scope["path"]):  # what OpenAI clients read an error from, in OpenAI's own words
        kind, openai_code = ("invalid_request_error", "invalid_api_key") if status == 401 else \
            ("permission_error", code)
        extra["error"] = {"message": f"{detail} ({hint})", "type": kind, "code": openai_code, "param": None}
    headers = {"www-authenticate": 'Bearer realm="optimize"'} if status == 401 else None
    await send_problem(scope, receive, send, status, code, detail, headers=headers, hint=hint, **extra)
