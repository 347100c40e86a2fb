"""OpenAI-compatible serving on the server itself: `POST /v1/chat/completions` and `POST /v1/completions`
(streaming included), where the request's `model` (a base model, a registry reference such as `proj/name` or
`proj/name:v2`, or a fine-tuned model's `ft:proj/name:v2`, served on its first request) selects the endpoint and
the base or adapter that answers, and `GET /v1/models` (and `GET /v1/models/{id}`), what answers now.

The server resolves the model to the exact version served, rewrites `model` to that name and forwards the
request to the endpoint's worker, passing its answer (or its stream) through unchanged.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response, StreamingResponse
from starlette.background import BackgroundTask

from optimize.api.auth import caller_of
from optimize.api.deps import DeploymentDep
from optimize.api.text_guard import json_of
from optimize.core.errors import Conflict, Invalid, NotFound, Unavailable
from optimize.core.refs import is_fine_tuned
from optimize.core.tokens import Role
from optimize.fine_tuning.serving import SERVE_WAIT_SECONDS, failure, start_serving
from optimize.schemas.endpoints import (
    ChatCompletion,
    ChatCompletionRequest,
    ResponseObject,
    ServedModel,
    ServedModelList,
    TextCompletion,
)
from optimize.serving import endpoints

router = APIRouter(prefix="/v1", tags=["serving"])
TIMEOUT = httpx.Timeout(600.0, connect=10.0)
# The worker's answer passes through unchanged: documented here, never filtered.
CHAT_RESPONSES: dict[int | str, dict[str, Any]] = {200: {
    "model": ChatCompletion,
    "description": "The chat.completion; with stream: true, server-sent chat.completion.chunk events, then [DONE]",
    "content": {"text/event-stream": {"schema": {"type": "string"}}}}}


def chat_request_body() -> dict[str, Any]:
    """`openapi_extra` documenting the request body the chat routes read themselves (to pass it on)."""
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": ChatCompletionRequest.model_json_schema()}}}}


@router.get("/models", response_model=ServedModelList)
def models(deployment: DeploymentDep) -> ServedModelList:
    return ServedModelList(object="list", data=endpoints.served_models(deployment))


@router.get("/models/{model_id:path}", response_model=ServedModel)
def model(model_id: str, deployment: DeploymentDep) -> ServedModel:
    found = next((m for m in endpoints.served_models(deployment) if m.id == model_id), None)
    if found is None:
        raise NotFound(f"model {model_id!r} is not served by any endpoint now", hint="GET /v1/models lists them")
    return found


@router.post("/chat/completions", responses=CHAT_RESPONSES, openapi_extra=chat_request_body())
async def chat(request: Request, deployment: DeploymentDep):
    return await forward(request, deployment, None)


TEXT_RESPONSES: dict[int | str, dict[str, Any]] = {200: {
    "model": TextCompletion, "description": "OpenAI's text_completion (legacy completions: a raw prompt, with echo "
                                            "and logprobs); with stream: true, server-sent events, then [DONE]",
    "content": {"text/event-stream": {"schema": {"type": "string"}}}}}


@router.post("/completions", responses=TEXT_RESPONSES)
async def completions(request: Request, deployment: DeploymentDep):
    return await forward(request, deployment, None, "completions")


RESPONSES_RESPONSES: dict[int | str, dict[str, Any]] = {200: {
    "model": ResponseObject, "description": "OpenAI's response object (output: a message and/or function calls); "
                                            "with stream: true, the Responses API's server-sent events, from "
                                            "response.created to response.completed",
    "content": {"text/event-stream": {"schema": {"type": "string"}}}}}


@router.post("/responses", responses=RESPONSES_RESPONSES)
async def responses(request: Request, deployment: DeploymentDep):
    """OpenAI's Responses API (text and function tools; previous_response_id goes on from a response the same
    endpoint answered within the hour), answered by the endpoint that serves the request's model."""
    return await forward(request, deployment, None, "responses")


async def _route(request: Request, deployment, model: Any, endpoint_id: str | None) -> tuple[str, str]:
    """Where the request goes; a fine-tuned model no endpoint serves is served first, for a caller who may start
    an endpoint (`fine_tuning.serving`), the request waiting while it loads."""
    try:
        return await run_in_threadpool(endpoints.route, deployment, model, endpoint_id)
    except NotFound:
        if endpoint_id is not None or not is_fine_tuned(model) or not caller_of(request).role.allows(Role.TRAINER):
            raise
    serving = await run_in_threadpool(start_serving, deployment, model)
    deadline = time.monotonic() + SERVE_WAIT_SECONDS
    while True:
        await asyncio.sleep(0.5)
        try:
            return await run_in_threadpool(endpoints.route, deployment, model, None)
        except (Conflict, NotFound) as waiting:
            ended = await run_in_threadpool(failure, deployment, serving)
            if ended is not None:
                raise Unavailable(f"the endpoint started for {model} will not answer: {ended}",
                                  hint=f"see it with: akka training endpoints get {serving[:12]}") from None
            if time.monotonic() > deadline:
                raise Unavailable(f"{model} is still loading on endpoint {serving[:12]} ({waiting.message})",
                                  hint=f"wait for it: akka training endpoints wait {serving[:12]}") from None


def _client(request: Request) -> httpx.AsyncClient:
    """The server's one client to its endpoints' workers (kept on the app: a client a request cost about 18 ms of
    the event loop's time, most of it building an SSL context). Loopback only, so no proxy from the environment."""
    client = getattr(request.app.state, "endpoint_client", None)
    if client is None:
        client = httpx.AsyncClient(timeout=TIMEOUT, trust_env=False,
                                   limits=httpx.Limits(max_connections=None, max_keepalive_connections=256))
        request.app.state.endpoint_client = client
    return client


async def _send(client: httpx.AsyncClient, address: str, route: str, body: dict, name: str) -> httpx.Response:
    outgoing = client.build_request("POST", f"http://{address}/v1/{route}", json={**body, "model": name})
    return await client.send(outgoing, stream=True)


def _unanswered(name: str, error: Exception) -> Unavailable:
    return Unavailable(f"the endpoint serving {name} did not answer: {error}",
                       hint="see its phase with: akka training endpoints list")


async def forward(request: Request, deployment, endpoint_id: str | None, route: str = "chat/completions") -> Response:
    body = json_of(await request.body(), "send a chat completion request: an object with model and messages")
    if not isinstance(body, dict):
        raise Invalid("the request body must be a JSON object with model and messages")
    kept = endpoints.kept_route(deployment, body.get("model"), endpoint_id)  # no thread needed for a kept one
    address, name = kept or await _route(request, deployment, body.get("model"), endpoint_id)
    client = _client(request)

    async def close() -> None:
        await answer.aclose()

    try:
        answer = await _send(client, address, route, body, name)
    except httpx.HTTPError as error:
        endpoints.forget_routes(deployment)  # a kept route may name a worker that is gone: resolve it again
        again = await run_in_threadpool(endpoints.route, deployment, body.get("model"), endpoint_id)
        if again == (address, name) or not isinstance(error, httpx.ConnectError):
            raise _unanswered(name, error) from None
        address, name = again
        try:  # nothing reached the old address: the request goes to the endpoint that serves the model now
            answer = await _send(client, address, route, body, name)
        except httpx.HTTPError as retried:
            raise _unanswered(name, retried) from None
    if answer.headers.get("content-type", "").startswith("text/event-stream"):
        return StreamingResponse(answer.aiter_raw(), status_code=answer.status_code, media_type="text/event-stream",
                                 background=BackgroundTask(close))
    content = await answer.aread()
    await close()
    kept = {"retry-after": answer.headers["retry-after"]} if "retry-after" in answer.headers else None
    # the worker's JSON as it sent it (parsing and writing it again cost the server's event loop for nothing)
    return Response(content, status_code=answer.status_code, headers=kept,
                    media_type=answer.headers.get("content-type", "application/json"))
