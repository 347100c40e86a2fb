"""Decoding under a grammar, with llguidance: a JSON schema (or any llguidance grammar) becomes a `Constraint`; a
`Matchers` of one model (its tokenizer, built once) gives each constrained answer a `RowMatcher`, which says the
tokens allowed next (`allowed`, for several rows at once) and is advanced by the token picked. Shared by endpoints
(structured outputs), evaluations and distillations (`--response-schema`).

JSON is written as Python's `json.dumps` writes it (`, ` and `: `, no other whitespace): a trained model's answers
mostly look like this, and they are read back the same. A schema llguidance cannot compile is refused naming the
field and its reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from optimize.core.errors import Invalid, ParamError

JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


class ConstraintError(ParamError):
    """A grammar that cannot be used; `param` names the field it came from."""


@dataclass(frozen=True)
class Constraint:
    grammar: str  # an llguidance grammar, checked
    kind: str  # json_object | json_schema | tool_call
    lark: str  # the same grammar as llguidance's Lark text, what an engine that compiles grammars itself reads (vLLM)


def checked(grammar: str, param: str) -> str:
    """The grammar, once llguidance says it compiles; else refused naming `param`."""
    from llguidance import LLMatcher

    error = LLMatcher.validate_grammar(grammar)
    if error:
        raise ConstraintError(f"{param} cannot be used for constrained decoding: {error.strip().splitlines()[0]}",
                              param)
    return grammar


def schema_grammar(schema: Any, param: str) -> str:
    """The grammar of JSON answers of `schema`."""
    from llguidance import LLMatcher

    if not isinstance(schema, dict):
        raise ConstraintError(f"{param} must be a JSON schema (an object)", param)
    try:
        grammar = LLMatcher.grammar_from_json_schema(schema, overrides=JSON_OPTIONS)
    except (ValueError, TypeError) as error:
        raise ConstraintError(f"{param} cannot be used for constrained decoding: {error}", param) from None
    return checked(grammar, param)


def schema_lark(schema: dict[str, Any]) -> str:
    """A JSON schema's grammar as Lark, its JSON written as `schema_grammar`'s is."""
    return f"start: %json {json.dumps({**schema, 'x-guidance': JSON_OPTIONS})}"


def json_constraint(schema: Any, param: str, kind: str = "json_schema") -> Constraint:
    return Constraint(schema_grammar(schema, param), kind, schema_lark(schema))


def refuse_uncompilable(schema: Any, param: str) -> None:
    """A job's response schema checked when the job is submitted, so one llguidance cannot compile is refused there
    naming `param` rather than by its worker; a server without llguidance (installed without the train extra)
    leaves the check to the worker."""
    try:
        import llguidance  # noqa: F401 - only whether it is there
    except ImportError:
        return
    try:
        schema_grammar(schema, param)
    except ConstraintError as error:
        raise Invalid(str(error), hint="use a schema llguidance compiles: see docs/endpoints.md") from None


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
