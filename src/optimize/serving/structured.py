"""Constrained decoding — OpenAI's structured outputs — with llguidance: a request's `response_format`
(`json_object`, or `json_schema` with its schema) or a `tool_choice` that forces a call (a named function, or
`required`: one of the offered tools) becomes a grammar; the batcher masks each constrained row's logits to the tokens
the grammar allows next and advances the row's matcher with the token picked, so an answer always parses.

A forced call is written in the model's own tool-call format (its catalog `toolCallParser`), its `arguments`
constrained to the tool's `parameters` schema: hermes (`<tool_call>` JSON `</tool_call>`, Qwen and SmolLM2) and
llama3_json (Llama 3.x's bare JSON object with `parameters`). The grammars, and the matchers the batcher advances,
are `chat.grammars`'.
"""

from __future__ import annotations

from typing import Any

from optimize.chat.grammars import Constraint, ConstraintError, checked, json_constraint, schema_grammar, schema_lark

# the tool-call formats a forced call can be written in: parser -> (lark before the call, after it, arguments key)
CALL_FORMATS = {"hermes": ('<tool_call> "\\n" ', ' "\\n" </tool_call>', "arguments"),
                "llama3_json": ("", "", "parameters")}


def read_response_format(form: Any) -> Constraint | None:
    """`response_format`: text (no constraint), json_object (any JSON object) or json_schema (its `schema`)."""
    kind = form.get("type") if isinstance(form, dict) else form
    if form is None or kind == "text":
        return None
    if kind == "json_object":
        return json_constraint({"type": "object"}, "response_format", "json_object")
    if kind == "json_schema":
        spec = form.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or "schema" not in spec:
            raise ConstraintError("response_format json_schema needs json_schema.name and json_schema.schema",
                                  "response_format")
        return json_constraint(spec["schema"], "response_format.json_schema.schema")
    raise ConstraintError(f"response_format type {kind!r} is not one of text, json_object, json_schema",
                          "response_format")


def forced_tools(choice: Any, tools: list[dict[str, Any]] | None) -> dict[str, dict[str, Any]] | None:
    """The offered tools a `tool_choice` forces a call of (`required`: any; a named function: that one), by name;
    None for none, auto or no choice."""
    if choice in (None, "none", "auto"):
        return None
    named = (choice.get("function") or {}).get("name") if isinstance(choice, dict) else None
    if choice != "required" and not (isinstance(choice, dict) and choice.get("type") == "function" and named):
        raise ConstraintError('tool_choice must be none, auto, required, or {"type": "function", "function": '
                              '{"name": NAME}}', "tool_choice")
    offered = {tool["function"]["name"]: tool["function"] for tool in tools or []}
    if not offered:
        raise ConstraintError("tool_choice forces a call, and the request offers no tools", "tool_choice")
    if named is not None and named not in offered:
        raise ConstraintError(f"tool_choice names {named!r}, which the request's tools do not offer (they offer "
                              f"{', '.join(sorted(offered))})", "tool_choice")
    return {name: function for name, function in offered.items() if named is None or name == named}


def forced_call(forced: dict[str, dict[str, Any]] | None, parser: str | None) -> Constraint | None:
    """The constraint of a call of one of the `forced` tools (`forced_tools`), written in the model's tool-call
    format (`parser`); None when no call is forced."""
    if forced is None:
        return None
    if parser not in CALL_FORMATS:
        raise ConstraintError(f"a forced tool call is written in the model's tool-call format; {parser or 'its'} "
                              "format cannot be forced here (hermes and llama3_json can); use tool_choice auto",
                              "tool_choice")
    before, after, arguments = CALL_FORMATS[parser]
    calls = [{"type": "object", "properties": {"name": {"const": name},
                                               arguments: function.get("parameters") or {"type": "object"}},
              "required": ["name", arguments], "additionalProperties": False}
             for name, function in forced.items()]
    schema = calls[0] if len(calls) == 1 else {"anyOf": calls}
    schema_grammar(schema, "tools")  # each tool's parameters compile
    # the call's JSON as a response's is written (no whitespace of the model's choosing: it could spend its tokens
    # on that and never close the call)
    lark = f"start: {before}call{after}\ncall: " + schema_lark(schema).removeprefix("start: ")
    from llguidance import LLMatcher

    return Constraint(checked(LLMatcher.grammar_from_lark(lark), "tool_choice"), "tool_call", lark)
