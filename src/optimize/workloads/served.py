"""Asking a model an endpoint serves, for a kind of work that does not serve it itself (a curation's judge named
`endpoint:MODEL`). Kinds side by side import none of one another, so the serving kind's asking is handed in here by
the server when it registers its kinds (`api.kinds`), and the kinds that ask reach it through `asker()`."""

from __future__ import annotations

from typing import Any, Protocol

from optimize.core.errors import Unavailable


class ServedAsker(Protocol):
    def exact_name(self, deployment: Any, model: str) -> str:
        """The exact name an endpoint answers for `model` now (an alias resolved to its version); refused when
        none does."""

    def ask(self, deployment: Any, served: str, conversations: list[list[dict[str, Any]]], max_tokens: int
            ) -> list[dict[str, str]]:
        """Each conversation's greedy reply, {"text": …}, or {"refused": …} where the endpoint refused that one;
        Unavailable when no endpoint answers for `served` now."""


_asker: ServedAsker | None = None


def provide(asker: ServedAsker) -> None:
    global _asker
    _asker = asker


def asker() -> ServedAsker:
    if _asker is None:
        raise Unavailable("this process serves no endpoints to ask", hint="ask through the server")
    return _asker
