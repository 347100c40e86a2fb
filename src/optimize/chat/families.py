"""Family rules for rendering: template arguments that make a family's template deterministic."""

from __future__ import annotations

from typing import Any

# Llama 3.x templates print today's date unless given one; a fixed date keeps rendering (and therefore
# analyses, training and evaluation) identical from day to day. It is the template's own default.
_LLAMA_DATE = {"date_string": "26 Jul 2024"}


# Where a family's model writes its reasoning when it thinks: between these two (special) tokens, before its answer.
_REASONING = {"gemma4": ("<|channel>", "<channel|>")}


def template_kwargs(family: str | None, thinking: bool = False) -> dict[str, Any]:
    """`thinking`: the model is asked to think first (Gemma 4's `enable_thinking`; a distillation's
    `--thinking on`)."""
    if family and family.startswith("llama3"):
        return dict(_LLAMA_DATE)
    if thinking and family == "gemma4":
        return {"enable_thinking": True}
    return {}


# Families whose chat template renders only content written as parts: a message written as a string would render
# as an empty turn (SmolVLM's template iterates over the content's parts).
_CONTENT_AS_PARTS = frozenset({"smolvlm"})


# Families whose models read images beside the text (a vision tower: SmolVLM's Idefics3 architecture).
_READS_IMAGES = frozenset({"smolvlm"})


def reads_images(family: str | None) -> bool:
    """Whether the family's models take images in user messages."""
    return family in _READS_IMAGES


def content_as_parts(family: str | None) -> bool:
    """Whether rows are rendered for the family with every message's content written as parts."""
    return family in _CONTENT_AS_PARTS


def reasoning_markers(family: str | None) -> tuple[str, str] | None:
    """The tokens a thinking model of the family opens and closes its reasoning with, or None."""
    return _REASONING.get(family or "")


def per_message_refusal(family: str | None, row: dict[str, Any]) -> str | None:
    """Why a family's template cannot render this row one message at a time, or None.

    Llama 3.2 puts the tool list into the first user message, so its template cannot render the system
    message alone with tools: a row with a system message that offers tools is refused by name instead of
    failing later with the template's own error.
    """
    messages = row.get("messages") or []
    if family == "llama3.2" and row.get("tools") and messages and messages[0].get("role") == "system":
        return ("Llama 3.2's chat template cannot render the system message on its own with tools; "
                "remove the system message or the tools from this row, or train it in a run that renders "
                "whole conversations")
    return None
