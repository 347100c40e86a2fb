"""A model an endpoint serves, asked by the server for another kind of work (`workloads.served`: a curation's judge
named `endpoint:MODEL`), as `/v1/chat/completions` would ask it — greedy, at most `max_tokens` — one call a
conversation, routed as a request for that model is (`endpoints.route`).

An endpoint that does not answer, is busy, or no longer serves the model is refused as unavailable (503), so the
worker that asked waits it out while its lease holds (an endpoint restarting comes back) rather than losing the
answers; an endpoint that refuses one conversation (a prompt beyond its context) answers that one as refused."""

from __future__ import annotations

from typing import Any

import httpx

from optimize.core.errors import Conflict, NotFound, Unavailable
from optimize.serving import endpoints

TIMEOUT = httpx.Timeout(300.0, connect=10.0)


class EndpointAsker:
    def exact_name(self, deployment: Any, model: str) -> str:
        if not model:
            raise NotFound("no model is named", hint="name a served model: endpoint:NS/NAME[:vN]; akka training "
                                                     "endpoints list shows what is served")
        _address, name = endpoints.route(deployment, model, None)
        return name

    def ask(self, deployment: Any, served: str, conversations: list[list[dict[str, Any]]], max_tokens: int
            ) -> list[dict[str, str]]:
        with httpx.Client(timeout=TIMEOUT, trust_env=False) as client:  # loopback, or the cluster's own network
            return [_ask(deployment, client, served, messages, max_tokens) for messages in conversations]


def _ask(deployment: Any, client: httpx.Client, served: str, messages: list[dict[str, Any]], max_tokens: int
         ) -> dict[str, str]:
    try:
        address, name = endpoints.route(deployment, served, None)
    except (NotFound, Conflict) as error:
        raise Unavailable(f"{served} is not answering: {error.message}", hint=error.hint) from None
    body = {"model": name, "messages": messages, "max_tokens": max_tokens, "temperature": 0}
    try:
        answer = client.post(f"http://{address}/v1/chat/completions", json=body)
    except httpx.HTTPError as error:
        endpoints.forget_routes(deployment)  # its worker moved: resolve the route again on the next try
        raise Unavailable(f"the endpoint serving {served} did not answer: {error}",
                          hint="see its phase with: akka training endpoints list") from None
    if answer.status_code in (429, 502, 503, 504):
        raise Unavailable(f"the endpoint serving {served} is busy or unavailable ({answer.status_code})",
                          hint="it is asked again while the work's lease holds")
    try:
        payload = answer.json()
    except ValueError:
        payload = None
    if answer.status_code != 200:
        said = payload.get("detail") if isinstance(payload, dict) else None
        return {"refused": f"the endpoint refused the prompt ({answer.status_code}): {said or answer.text[:300]}"}
    try:
        return {"text": payload["choices"][0]["message"]["content"] or ""}
    except (KeyError, IndexError, TypeError):
        return {"refused": f"the endpoint's answer holds no message: {answer.text[:300]}"}
