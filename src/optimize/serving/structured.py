"""Constrained decoding — OpenAI's structured outputs — with llguidance: a request's `response_format`
(`json_object`, or `json_schema` with its schema) or a `tool_choice` that forces a call (a named function, or
`required`: one of the offered tools) becomes a grammar; the batcher masks each constrained row's logits to the tokens
the grammar allows next and advances the row's matcher with the token picked, so an answer always parses.

A forced call is written in the model's own tool-call format (its catalog `toolCallParser`), its `arguments`
constrained to the tool's `parameters` schema: hermes (`<tool_call>` JSON `</tool_call>`, Qwen and SmolLM2) and
llama3_json (Llama 3.x's bare JSON object with `parameters`). JSON is written as Python's `json.dumps` writes it
(`, ` and `: `, no other whitespace). A schema llguidance cannot compile is refused naming the field and its reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# JSON as json.dumps writes it: a trained model's answers mostly look like this, and they are read back the same
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
# the tool-call formats a forced call can be written in: parser -> (lark before the call, after it, arguments key)
CALL_FORMATS = {"hermes": ('<tool_call> "\\n" ', ' "\\n" </tool_call>', "arguments"),
                "llama3_json": ("", "", "parameters")}


class ConstraintError(ValueError):
    """A structured-output request the engine cannot constrain; `param` names the field."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class Constraint:
    grammar: str  # an llguidance grammar
    kind: str  # json_object | json_schema | tool_call


def _checked(grammar: str, param: str) -> str:
    from llguidance import LLMatcher

    error = LLMatcher.validate_grammar(grammar)
    if error:
        raise ConstraintError(f"{param} cannot be used for constrained decoding: {error.strip().splitlines()[0]}",
                              param)
    return grammar


def _schema_grammar(schema: Any, param: str) -> str:
    from llguidance import LLMatcher

    if not isinstance(schema, dict):
        raise ConstraintError(f"{param} must be a JSON schema (an object)", param)
    try:
        grammar = LLMatcher.grammar_from_json_schema(schema, overrides=JSON_OPTIONS)
    except (ValueError, TypeError) as error:
        raise ConstraintError(f"{param} cannot be used for constrained decoding: {error}", param) from None
    return _checked(grammar, param)


def read_response_format(form: Any) -> Constraint | None:
    """`response_format`: text (no constraint), json_object (any JSON object) or json_schema (its `schema`)."""
    kind = form.get("type") if isinstance(form, dict) else form
    if form is None or kind == "text":
        return None
    if kind == "json_object":
        return Constraint(_schema_grammar({"type": "object"}, "response_format"), "json_object")
    if kind == "json_schema":
        spec = form.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or "schema" not in spec:
            raise ConstraintError("response_format json_schema needs json_schema.name and json_schema.schema",
                                  "response_format")
        return Constraint(_schema_grammar(spec["schema"], "response_format.json_schema.schema"), "json_schema")
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


def forced_call(choice: Any, tools: list[dict[str, Any]] | None, parser: str | None) -> Constraint | None:
    """The constraint of a `tool_choice` that forces a call, written in the model's tool-call format (`parser`);
    None for none, auto or no choice."""
    forced = forced_tools(choice, tools)
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
    _schema_grammar(schema, "tools")  # each tool's parameters compile
    lark = f"start: {before}call{after}\ncall: %json {json.dumps(schema)}"
    from llguidance import LLMatcher

    return Constraint(_checked(LLMatcher.grammar_from_lark(lark), "tool_choice"), "tool_call")


class Matchers:
    """One engine's llguidance tokenizer (built once: about a second) and a matcher for each constrained row."""

    def __init__(self, tokenizer: Any, vocabulary: int, stop_ids: list[int]) -> None:
        import llguidance.hf

        self.vocabulary = vocabulary
        self.tokenizer = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocabulary, eos_token=list(stop_ids))

    def matcher(self, constraint: Constraint) -> RowMatcher:
        from llguidance import LLMatcher

        return RowMatcher(LLMatcher(self.tokenizer, constraint.grammar, log_level=0), self.vocabulary)


def allowed(torch, rows: list[RowMatcher]) -> Any:
    """A boolean tensor (rows, vocabulary): the tokens each row's grammar allows next (its bitmask, a bit a token,
    unpacked for all the rows at once)."""
    import numpy

    words = torch.from_numpy(numpy.stack([numpy.frombuffer(row.matcher.compute_bitmask(), dtype=numpy.int32)
                                          for row in rows]))
    bits = (words.unsqueeze(-1) >> torch.arange(32, dtype=torch.int32)) & 1
    return bits.reshape(len(rows), -1)[:, :rows[0].vocabulary].bool()


class RowMatcher:
    """Where one row's answer is in its grammar (`allowed` reads the tokens it allows next), advanced by the token
    picked."""

    def __init__(self, matcher: Any, vocabulary: int) -> None:
        self.matcher, self.vocabulary = matcher, vocabulary

    def advance(self, token: int) -> None:
        if not self.matcher.consume_token(token):
            raise RuntimeError(f"constrained decoding failed: {self.matcher.get_error().splitlines()[0]}")
