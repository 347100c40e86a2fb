"""Endpoints and OpenAI-compatible serving: `/v1/training/endpoints`, `/v1/models` and
`/v1/chat/completions`."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, Field

from optimize.schemas.common import Answer, BaseModelPin, Number, OpenAIAnswer
from optimize.schemas.requests import Refusal, RequestModel

# --- requests ----------------------------------------------------------------------------------------------
# The chat routes' body is ChatCompletionRequest, read by the serving process.

_NEEDS_MODEL = Refusal("an endpoint needs model (a base model or a registered model NS/NAME[:vN])")
_NEEDS_DETACHED = Refusal("detach needs model: the attached model reference to stop serving")
_NEEDS_SERVED = Refusal("{verb} needs model: the base model or an attached model the endpoint serves")


class EndpointRequest(RequestModel):
    """`POST /v1/training/endpoints`: serve a model, on a new endpoint or attached to one of the project's that
    already serves its base model."""

    not_an_object: ClassVar[Refusal] = _NEEDS_MODEL

    model: Annotated[str, _NEEDS_MODEL] = Field(
        pattern=r"\S", description="The model served: a base model, or a registered model NS/NAME[:vN|:ALIAS]")
    project: Annotated[str | None, Refusal("project must be a name (a string)")] = Field(
        default=None, description="The project the endpoint serves for (a registered model's own; needed for a base "
                                  "model)")
    device_profile: Annotated[str | None, Refusal("deviceProfile must be a name (a string)")] = Field(
        default=None, description="The device profile it runs on (default: one the catalog serves the base model on, "
                                  "else cpu)")


class DetachRequest(RequestModel):
    """`POST /v1/training/endpoints/{id}/detach`."""

    not_an_object: ClassVar[Refusal] = _NEEDS_DETACHED

    model: Annotated[str, _NEEDS_DETACHED] = Field(min_length=1,
                                                    description="The attached model reference to stop serving")


class EnableRequest(RequestModel):
    """`POST /v1/training/endpoints/{id}/disable` and `…/enable` (the refusals name the verb, `parse(body, verb=…)`)."""

    not_an_object: ClassVar[Refusal] = _NEEDS_SERVED

    model: Annotated[str, _NEEDS_SERVED] = Field(
        min_length=1, description="The model to disable or enable at the endpoint: the base model's id, or an "
                                  "attached adapter's name (NS/NAME selects each of its versions attached)")


# --- answers ------------------------------------------------------------------------------------------------


class EndpointModel(Answer):
    name: str = Field(description="The name a request's model selects it by: the base model's entry id or NS/NAME:vN")
    kind: str = Field(description="base or adapter")
    ready: bool = Field(description="Whether its worker answers for it now")
    enabled: bool = Field(description="False while it is disabled at the endpoint: requests through the server are "
                                      "answered 409 (it stays loaded; akka training endpoints enable undoes it)")
    instructions: str | None = Field(description="The system instructions the adapter was trained with, if any")
    follows: str | None = Field(default=None, description="The alias it was served by (champion): when the alias "
                                                          "moves, the endpoint serves the version it points at next")
    replaced_by: str | None = Field(default=None, description="The version its alias moved to: requests for the "
                                                              "alias go there once it is loaded, and this one is "
                                                              "detached")


class EndpointLoad(Answer):
    """What an endpoint's worker last reported (about every two seconds) of the load it carries."""

    served: int | None = Field(default=None, description="Requests finished since it started")
    in_flight: int | None = Field(default=None, description="Requests decoding in its batch now")
    queued: int | None = Field(default=None, description="Requests waiting for a row of its batch")
    tokens: int | None = Field(default=None, description="Tokens generated since it started")
    tokens_per_second: Number | None = Field(default=None, description="Tokens generated per second over the last "
                                                                        "minute")
    latency_p50_seconds: Number | None = Field(default=None, description="Median time of a request finished in the "
                                                                         "last minute, submission to end")
    latency_p95_seconds: Number | None = Field(default=None, description="95th percentile of the same")


class Endpoint(Answer):
    """An endpoint: one resident base model and the adapters attached to it."""

    endpoint_id: str = Field(description="The endpoint's id")
    project: str = Field(description="The project it serves for")
    model: str = Field(description="The model it was created for")
    base_model: BaseModelPin = Field(description="The resident base model and commit")
    models: list[EndpointModel] = Field(description="What it serves: the base model, then each adapter attached")
    phase: str = Field(description="AWAITING_CAPACITY, STARTING, READY, FAILED or DELETED")
    attempt: int = Field(description="Workers started for it")
    device_profile: str = Field(description="Device profile it runs on")
    devices_held: list[str] = Field(description="Devices it holds while STARTING or READY")
    failure_reason: str | None = Field(description="Why it failed or was taken down")
    created_at: str = Field(description="When it was created (ISO 8601, UTC)")
    ready_at: str | None = Field(description="When it first answered (ISO 8601, UTC)")
    last_request_at: str | None = Field(description="When it last answered a request (ISO 8601, UTC)")
    finished_at: str | None = Field(description="When it ended (ISO 8601, UTC)")
    load: EndpointLoad | None = Field(default=None, description="The load its worker last reported; null unless "
                                                                "READY and reported")
    terminal: bool = Field(description="Whether it has ended (FAILED or DELETED)")
    settled: bool = Field(description="Whether it answers with every model, or never will")
    waiting_for: str | None = Field(default=None, description="What an endpoint AWAITING_CAPACITY waits for, in "
                                                              "words; null otherwise (one endpoint's answer and its "
                                                              "events)")


class EndpointCreated(Endpoint):
    attached: bool = Field(description="True when the model was attached to an endpoint already serving its base "
                                       "model (200); false for a new endpoint (202)")


class EndpointListItem(Endpoint):
    project_archived: bool = Field(description="Whether the endpoint's project is archived")


class EndpointList(Answer):
    endpoints: list[EndpointListItem] = Field(description="Endpoints, newest first (at most 500)")


class EndpointsInfo(Answer):
    """What endpoints of this deployment can do."""

    idle_timeout_seconds: Number = Field(description="An endpoint answering no request this long is taken down")
    adapters_at_once: int = Field(description="Adapters one endpoint loads at once")
    devices_per_endpoint: int = Field(description="Devices one endpoint holds")
    engine: str = Field(description="The serving engine")
    tool_call_parsers: list[str] = Field(description="Tool-call parsers the engine knows")
    device_profiles: list[str] = Field(description="Device profiles of this deployment")


# --- OpenAI shapes --------------------------------------------------------------------------------------------


class ServedModel(OpenAIAnswer):
    """A model that answers now, in OpenAI's model shape."""

    id: str = Field(description="The name to pass as a request's model")
    object: str = Field(description="Always model")
    created: int = Field(description="When its endpoint became ready (Unix seconds)")
    owned_by: str = Field(description="The project serving it")
    endpoint: str = Field(description="The endpoint serving it")
    instructions: str | None = Field(default=None, description=(
        "Its trained instructions (its first training row's system message): the system message a chat request "
        "that brings none is answered with, unless the request sets trained_instructions: false"))


class ServedModelList(OpenAIAnswer):
    object: str = Field(description="Always list")
    data: list[ServedModel] = Field(description="Every model answering now")


class ChatCompletionRequest(BaseModel):
    """An OpenAI chat completion request (fields the endpoints read; others are passed on)."""

    model: str | None = Field(default=None, description="A served model: a base model, or NS/NAME[:vN|:ALIAS] "
                                                         "(GET /v1/models lists them)")
    messages: list[dict[str, Any]] = Field(description="The conversation, in OpenAI's message shape")
    tools: list[dict[str, Any]] | None = Field(default=None, description="Functions the model may call")
    tool_choice: Any = Field(default=None, description="none leaves the tools out")
    max_tokens: int | None = Field(default=None, description="Most tokens to generate (default 256)")
    max_completion_tokens: int | None = Field(default=None, description="The same, OpenAI's newer name")
    temperature: Number | None = Field(default=None, description="Sampling temperature, 0 to 2 (default 1)")
    top_p: Number | None = Field(default=None, description="Nucleus sampling, 0 to 1 (default 1)")
    n: int | None = Field(default=None, description="Choices to answer; only 1")
    stream: bool | None = Field(default=None, description="Answer as server-sent chat.completion.chunk events")


class ChatMessage(OpenAIAnswer):
    role: str = Field(description="Always assistant")
    content: str | None = Field(description="The answer's text")
    tool_calls: list[dict[str, Any]] | None = Field(default=None, description="Calls of the request's tools")


class ChatChoice(OpenAIAnswer):
    index: int = Field(description="Always 0: one choice a request")
    message: ChatMessage = Field(description="The answer")
    finish_reason: str | None = Field(description="stop, length or tool_calls")
    logprobs: Any = Field(description="Always null")


class ChatUsage(OpenAIAnswer):
    prompt_tokens: int = Field(description="Tokens in the rendered prompt")
    completion_tokens: int = Field(description="Tokens generated")
    total_tokens: int = Field(description="Both together")
    prompt_tokens_details: dict[str, int] | None = Field(
        default=None, description="cached_tokens: prompt tokens taken from a kept prefix of an earlier request "
                                  "(not computed again)")


class TextChoice(OpenAIAnswer):
    index: int = Field(description="Always 0")
    text: str = Field(description="The continuation (with echo: the prompt, then the continuation)")
    finish_reason: str = Field(description="stop (a stop token or string) or length")
    logprobs: dict[str, Any] | None = Field(description="With logprobs: tokens, token_logprobs (the echoed prompt's "
                                                        "first is null), top_logprobs and text_offset")


class TextCompletion(OpenAIAnswer):
    """An OpenAI text_completion (legacy completions), as the endpoint's worker answered it."""

    id: str = Field(description="cmpl-…")
    object: str = Field(description="Always text_completion")
    created: int = Field(description="Unix seconds")
    model: str = Field(description="The exact model version that answered")
    choices: list[TextChoice] = Field(description="One choice")
    usage: ChatUsage = Field(description="Token counts")


class ChatCompletion(OpenAIAnswer):
    """An OpenAI chat.completion, as the endpoint's worker answered it."""

    id: str = Field(description="chatcmpl-…")
    object: str = Field(description="Always chat.completion")
    created: int = Field(description="Unix seconds")
    model: str = Field(description="The exact model version that answered")
    choices: list[ChatChoice] = Field(description="One choice")
    usage: ChatUsage = Field(description="Token counts")


class ResponseUsage(OpenAIAnswer):
    input_tokens: int = Field(description="Tokens in the rendered prompt")
    input_tokens_details: dict[str, int] = Field(description="cached_tokens: prompt tokens taken from a kept prefix")
    output_tokens: int = Field(description="Tokens generated")
    output_tokens_details: dict[str, int] = Field(description="reasoning_tokens: always 0 here")
    total_tokens: int = Field(description="Both together")


class ResponseObject(OpenAIAnswer):
    """OpenAI's response object (the Responses API), as the endpoint's worker answered it; the request's
    instructions, tools, tool_choice, sampling, text and metadata come back beside these."""

    id: str = Field(description="resp_…: the previous_response_id a later request may name (kept an hour)")
    object: str = Field(description="Always response")
    created_at: int = Field(description="Unix seconds")
    status: str = Field(description="completed, or incomplete when max_output_tokens cut the answer")
    incomplete_details: dict[str, str] | None = Field(description="reason: max_output_tokens, when incomplete")
    model: str = Field(description="The exact model version that answered")
    output: list[dict[str, Any]] = Field(description="A message (output_text parts) and/or function_call items")
    output_text: str = Field(description="The output messages' text, joined")
    usage: ResponseUsage = Field(description="Token counts")
