"""A row as a base model sees it (the dashboard's row viewer): rendered through the one chat core under the model's
chat template, exactly as a supervised run renders it, each token with whether it trains under the loss policy
asked for. The model's fast tokenizer is loaded without torch (the server stays light) and kept for the next row.
A row's images stay their template's placeholder here (a run expands each into the tokens its processor writes);
the dashboard shows the images beside the tokens.
"""

from __future__ import annotations

import threading
from functools import lru_cache
from typing import Any

from optimize.catalog.selection import model_dir
from optimize.chat.families import content_as_parts, reads_images, template_kwargs
from optimize.chat.images import image_paths
from optimize.chat.render import ALL, FINAL, ChatRenderer, LossPolicy, RenderError
from optimize.chat.rows import RowError, RowKind, check_row
from optimize.core.errors import Invalid, Refused
from optimize.deployment import Deployment
from optimize.schemas.catalog import RenderedRow

_loading = threading.Lock()


@lru_cache(maxsize=4)
def _renderer(directory: str, family: str, corrected: bool) -> ChatRenderer:
    return ChatRenderer.from_pretrained(directory, template_kwargs(family), corrected_family=family if corrected
                                        else None, light=True, parts=content_as_parts(family))


def render_row(deployment: Deployment, model: str, row: Any, loss: dict[str, Any] | None = None) -> RenderedRow:
    """The row's text under `model`'s template, as tokens each marked trained or not."""
    entry = deployment.catalog.find(model)
    directory = model_dir(deployment.store, deployment.catalog, entry.id)  # a model never selected is refused
    try:
        check_row(row, RowKind.CHAT)
    except RowError as error:
        raise Invalid(f"the row breaks the registry's row rule: {error}") from None
    if image_paths(row) and not reads_images(entry.family):
        raise Refused(f"the row holds images, and {entry.id} reads no images",
                      hint="render it under a model that takes images (the smolvlm family)")
    loss = loss or {}
    turns, calls = loss.get("assistantTurns", LossPolicy.assistant_turns), loss.get("trainOnToolCalls", True)
    if turns not in (FINAL, ALL):
        raise Invalid(f"loss.assistantTurns must be {FINAL} or {ALL}")
    if not isinstance(calls, bool):
        raise Invalid("loss.trainOnToolCalls must be true or false")
    policy = LossPolicy(turns, calls, None)
    with _loading:  # one load per model, not one per concurrent request
        renderer = _renderer(str(directory), entry.family, entry.chat_template == "corrected")
    try:
        rendered = renderer.render(row, policy)
    except RenderError as error:
        raise Refused(f"{entry.id}'s chat template cannot render this row: {error}") from None
    except ValueError as error:  # the template's own refusals
        raise Refused(f"{entry.id}'s chat template refuses this row: {error}") from None
    tokenizer = renderer.tokenizer
    tokens = [[rendered.text[start:end] if end > start else tokenizer.decode([token]), bool(trained)]
              for token, trained, (start, end) in zip(rendered.input_ids, rendered.loss_mask, rendered.offsets,
                                                             strict=True)]
    tools = [(tool.get("function") or {}).get("name") for tool in row.get("tools") or [] if isinstance(tool, dict)]
    return RenderedRow(
        model=entry.id, chat_template_sha256=renderer.chat_template_sha256, text=rendered.text, tokens=tokens,
        total_tokens=len(tokens), trained_tokens=rendered.trained_tokens, tools=tools,
        loss={"assistantTurns": policy.assistant_turns, "trainOnToolCalls": policy.train_on_tool_calls})
