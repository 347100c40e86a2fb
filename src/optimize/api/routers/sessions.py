"""Sessions: `POST /v1/training/sessions?source=S&project=P` (a conversation file's bytes, parsed on the server
into candidates and kept; 201 new, 200 the session the same content already is) and
`GET /v1/training/sessions/{hash}` (a session with its first candidates)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from optimize.api.bodies import streamed_body
from optimize.api.deps import DeploymentDep
from optimize.api.streamed import declared_size, receive
from optimize.core.errors import PlatformError
from optimize.sessions import service
from optimize.sessions.answers import SessionCreated, SessionDetail

router = APIRouter(prefix="/v1/training/sessions", tags=["training"])

MEDIA_TYPES = ("application/x-ndjson", "application/octet-stream")


class UnsupportedMedia(PlatformError):
    code = "unsupported_media_type"
    status = 415
    title = "Unsupported media type"


@router.post("", response_model=SessionCreated, status_code=201, response_description="The session was created",
             responses={200: {"model": SessionCreated, "description": "The project held a session of the same "
                                                                      "content already"}},
             openapi_extra=streamed_body("application/x-ndjson", "The conversation file's bytes, as they are: "
                                         "OASST1 message trees, OTLP JSON logs batches or captured calls, one per "
                                         "line (application/octet-stream is taken too); refused by line when a "
                                         "line does not fit its format"))
async def create_session(request: Request, deployment: DeploymentDep, source: str | None = None,
                         project: str | None = None) -> JSONResponse:
    """Parse a conversation file into candidates and keep them as a session of the project: `source` is oasst1,
    otel or canonical; `project` may be left out when the token is limited to one project. The answer's
    `sessionHash` names the session (there is no list of sessions). A refused line stores nothing."""
    media = (request.headers.get("content-type") or "").split(";")[0].strip().lower()
    if media not in MEDIA_TYPES:
        raise UnsupportedMedia(f"a session's file is sent as {' or '.join(MEDIA_TYPES)}, not "
                               f"{media or 'a body without a Content-Type'}",
                               hint="send the file's bytes with Content-Type: application/x-ndjson")
    receiver = await run_in_threadpool(service.open_session, deployment, source, project, declared_size(request))
    created = await receive(request, receiver)
    return JSONResponse(created.model_dump(mode="json", by_alias=True), status_code=201 if created.created else 200)


@router.get("/{session_hash}", response_model=SessionDetail)
def get_session(session_hash: str, deployment: DeploymentDep, project: str | None = None,
                first: int | None = None) -> SessionDetail:
    """A session by its hash, with its `first` candidates (default 5, at most 100: a session may hold far more than
    an answer should); `project` where the token sees the same session in two projects."""
    return service.get_session(deployment, session_hash, project, first)
