"""A fine-tuned model served on its first request: a chat request for an `ft:` name no endpoint serves starts one
for it (or attaches it to the project's endpoint of its base model), as OpenAI answers a fine-tuned model as soon
as its job succeeded. The request then waits for the model to load (`SERVE_WAIT_SECONDS`)."""

from __future__ import annotations

from optimize.core.refs import without_fine_tuned
from optimize.deployment import Deployment
from optimize.schemas.endpoints import EndpointRequest
from optimize.serving import endpoints

SERVE_WAIT_SECONDS = 300.0  # a model's load on its endpoint; the openai client waits 600 s for an answer


def start_serving(deployment: Deployment, model: str) -> str:
    """The endpoint that will serve the fine-tuned model (created, or the project's one it is attached to)."""
    return endpoints.create(deployment, EndpointRequest(model=without_fine_tuned(model))).endpoint_id


def failure(deployment: Deployment, endpoint_id: str) -> str | None:
    """Why the endpoint will never answer, once it will not."""
    endpoint = endpoints.get(deployment, endpoint_id)
    return (endpoint.failure_reason or endpoint.phase) if endpoint.terminal else None
