"""Request bodies a route reads as sent and parses itself, documented in /openapi.json by their request model.

A route parses its body with the model (`RequestModel.parse`, `optimize.schemas.requests`), which refuses a bad body
in the words each field declares (a problem+json `detail` naming the field and what to change, and a `hint`); FastAPI's
own 422 for a wrong type or a missing field would replace those words. So the parameter stays `Any` and reaches the
route exactly as sent, while the operation's requestBody is the model's schema:

    body: Annotated[Any, documented_as(PinRequest), Body()] = None
    …
    kinds = PinRequest.parse(body).kinds

The model is documented as any typed body is: a `$ref` to components/schemas, its nested models registered there
too. A body FastAPI lets be left out but the route refuses without (a pause needs its checkpoint) is marked required
with `openapi_extra=required_body()`; a body a route streams itself (a dataset shard) is documented with
`openapi_extra=streamed_body(…)`. (The chat routes, which read the request themselves to pass it on, document theirs
with `openapi_extra` from their model too.)
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, PlainValidator


def _as_sent(value: Any) -> Any:
    return value


def documented_as(model: type[BaseModel]) -> PlainValidator:
    """Metadata for an `Annotated[Any, …, Body()]` parameter: validates nothing, documents `model`."""
    return PlainValidator(_as_sent, json_schema_input_type=model)


def required_body() -> dict[str, Any]:
    """`openapi_extra` of a route whose body parameter defaults to None (so that leaving it out reaches the route,
    which refuses it in its own words) but whose body is needed all the same."""
    return {"requestBody": {"required": True}}


def streamed_body(media_type: str, description: str) -> dict[str, Any]:
    """`openapi_extra` of a route that reads its body's bytes itself, as they arrive."""
    return {"requestBody": {"required": True, "content": {media_type: {"schema": {
        "type": "string", "format": "binary", "description": description}}}}}


def is_json_body(scope) -> bool:
    """Whether an ASGI request says its body is one JSON document (NDJSON shards are not)."""
    for name, value in scope["headers"]:
        if name == b"content-type":
            return b"json" in value.lower() and b"ndjson" not in value.lower()
    return False
