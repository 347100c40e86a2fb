"""Corrected chat templates: where Optimize renders a family under a corrected copy of its shipped template.

Gemma 4's shipped templates write an assistant message's tool calls (and their results) before the text of
the same message, while the model writes its text first. Optimize trains, evaluates and serves Gemma 4
under a copy that renders the message's text before its calls. The copy is derived from the shipped template
at load time by moving one block; a template the correction does not recognise is refused, never guessed at.
"""

from __future__ import annotations

from optimize.chat.render import RenderError

_CALLS = ("            {%- if message.get('tool_calls') -%}\n"
          "                {%- for tool_call in message.get('tool_calls') -%}")
_CONTENT_START = "            {%- set captured_content -%}"
_CONTENT_END = "            {{- captured_content -}}\n"


def gemma4_text_before_calls(template: str) -> str:
    calls = template.find(_CALLS)
    start = template.find(_CONTENT_START)
    end = template.find(_CONTENT_END, start)
    if min(calls, start, end) < 0 or not calls < start < end:
        raise RenderError("this Gemma 4 chat template is not one Optimize knows how to correct")
    block = template[start:end + len(_CONTENT_END)]
    without = template[:start] + template[end + len(_CONTENT_END):]
    return without[:calls] + block + without[calls:]


CORRECTIONS = {"gemma4": gemma4_text_before_calls}


def corrected_template(family: str, template: str) -> str:
    try:
        return CORRECTIONS[family](template)
    except KeyError:
        raise RenderError(f"Optimize has no corrected chat template for the {family} family") from None
