"""Scoring: how an answer is scored, shared by GRPO/GSPO reward terms (in the training worker) and evaluation
graders.

- `samples`: `Sample` (prompt messages, completion text, the row's expected answer and other fields) and `Score`
  (a value, or None when it does not apply; an error recorded, never raised); `sample_from_row` makes the one
  split of a row into prompt, expected answer and fields.
- `members`: the built-in members (`exact`, `contains`, `regex`, `jsonFieldMatch`, `numeric`, `length`), built
  from plain dict specs (camelCase keys, as a run plan writes them); `check_member` validates any spec with
  messages that name the field's path; `missing_fields` names the dataset lines lacking a member's reference;
  `json_field_match` is the evaluation grader `json-label-match`.
- `bundle_runner`: `BundleRunner` runs a scoring bundle's function (`MODULE[:FUNCTION]`, called as
  `fn(prompt_messages, completion_text, fields)`) in a separate process with time, memory and network limits.
- `terms`: `build_member(spec, bundle_source)` builds any member, built-in or `rule` (a bundle's function).

This package imports only `optimize.core` and the standard library (no torch, no store): the training worker
imports it.
"""

from optimize.scoring.bundle_runner import BundleRunner
from optimize.scoring.members import (
    BUILTIN_KINDS,
    KINDS,
    check_member,
    json_field_match,
    missing_fields,
    parse_function,
    referenced_field,
)
from optimize.scoring.samples import Sample, Score, sample_from_row
from optimize.scoring.terms import Member, build_member, check_term

__all__ = [
    "BUILTIN_KINDS", "KINDS", "BundleRunner", "Member", "Sample", "Score", "build_member", "check_member",
    "check_term", "json_field_match", "missing_fields", "parse_function", "referenced_field", "sample_from_row",
]
