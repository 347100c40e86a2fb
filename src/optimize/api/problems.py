"""Errors as RFC 9457 problem details; never a 500 with a stack trace for bad input."""

from __future__ import annotations

import json
import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from optimize.core.errors import PlatformError

MEDIA_TYPE = "application/problem+json"
log = logging.getLogger("optimize.api")


def problem(status: int, code: str, detail: str, **extra) -> JSONResponse:
    body = {"type": f"https://optimize.dev/problems/{code}", "title": code.replace("_", " "), "status": status,
            "code": code, "detail": detail, **extra}
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE)


async def send_problem(scope, receive, send, status: int, code: str, detail: str,
                       headers: dict[str, str] | None = None, **extra) -> None:
    """The same problem, answered from an ASGI middleware in front of the routes (the gate, the body checks); on
    OpenAI's routes with OpenAI's `error` object too, unless the caller gives its own."""
    from optimize.api.auth import OPENAI

    if "error" not in extra and OPENAI.search(scope["path"]):
        message = detail + (f" ({extra['hint']})" if extra.get("hint") else "")
        extra["error"] = {"message": message, "type": _openai_type(status), "code": code, "param": None}
    response = problem(status, code, detail, **extra)
    response.headers.update(headers or {})
    await response(scope, receive, send)


def _field_path(location: tuple) -> str:
    parts = [str(part) for part in location if part not in ("body", "query", "path")]
    return ".".join(parts) or "body"


def _openai(request: Request, response: JSONResponse) -> JSONResponse:
    """On OpenAI's routes, the problem also carries OpenAI's `error` object, what its clients read an error from."""
    from optimize.api.auth import OPENAI

    if OPENAI.search(request.url.path):
        body = json.loads(response.body)
        message = body["detail"] + (f" ({body['hint']})" if body.get("hint") else "")
        body["error"] = {"message": message, "type": _openai_type(response.status_code), "code": body["code"],
                         "param": body.get("param")}
        response = JSONResponse(body, status_code=response.status_code, media_type=MEDIA_TYPE,
                                headers={k: v for k, v in response.headers.items()
                                         if k.lower() not in ("content-length", "content-type")})
    return response


def _openai_type(status: int) -> str:
    return {404: "not_found_error", 401: "authentication_error", 403: "permission_error",
            429: "rate_limit_error"}.get(status, "invalid_request_error")


def install(app: FastAPI) -> None:
    @app.exception_handler(PlatformError)
    async def platform_error(request: Request, error: PlatformError) -> JSONResponse:
        return _openai(request, JSONResponse(error.to_problem(), status_code=error.status, media_type=MEDIA_TYPE))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
        issues = [f"{_field_path(tuple(item['loc']))}: {item['msg']}" for item in error.errors()]
        return _openai(request, problem(422, "invalid", "; ".join(issues) or "the request is not valid"))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        detail = str(error.detail)
        if error.status_code == 404 and request.url.path.startswith("/v1/"):
            detail = f"no route {request.method} {request.url.path} on this server"
        return _openai(request, problem(error.status_code, "http_error", detail))

    @app.exception_handler(Exception)
    async def unexpected(_request: Request, error: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return problem(500, "internal", f"the server failed unexpectedly ({type(error).__name__}); see its log")
