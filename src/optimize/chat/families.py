"""Family rules for rendering: template arguments that make a family's template deterministic."""

from __future__ import annotations

from typing import Any

# Llama 3.x templates print today's date unless given one; a fixed date keeps rendering (and therefore
# analyses, training and evaluation) identical from day to day. It is the template's own default.
_LLAMA_DATE = {"date_string": "26 Jul 2024"}


def template_kwargs(family: str | None) -> dict[str, Any]:
    if family and family.startswith("llama3"):
        return dict(_LLAMA_DATE)
    return {}
