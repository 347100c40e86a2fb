"""The built-in scoring members: each one's score, what makes it not apply, and the refusals of bad specs."""

from __future__ import annotations

import json

import pytest

from optimize.core.errors import Invalid
from optimize.scoring import Sample, Score, build_member, check_member, check_term, missing_fields, sample_from_row
from optimize.scoring.graders import json_label_match
from optimize.scoring.members import build_builtin, find_json, json_field_match, numbers_in


def scores(spec, *samples):
    return [score.value for score in build_builtin(spec).score(list(samples))]


def s(completion, expected=None, **fields):
    return Sample(prompt=[{"role": "user", "content": "q"}], completion=completion, expected=expected, fields=fields)


def test_exact_compares_stripped_text_case_sensitive_unless_told():
    assert scores({"kind": "exact"}, s(" Paris\n", "Paris"), s("paris", "Paris"), s("Paris!", "Paris")) \
        == [1.0, 0.0, 0.0]
    assert scores({"kind": "exact", "caseSensitive": False}, s("PARIS ", "paris")) == [1.0]


def test_a_named_field_is_the_reference_and_a_missing_one_does_not_apply():
    spec = {"kind": "exact", "field": "answer"}
    assert scores(spec, s("42", "ignored", answer="42"), s("42", answer=42), s("42", "42"), s("42", answer=None)) \
        == [1.0, 1.0, None, None]
    nested = {"kind": "exact", "field": "metadata.city"}
    assert scores(nested, s("Oslo", metadata={"city": "Oslo"}), s("Oslo", metadata={}), s("Oslo")) == [1.0, None, None]
    assert scores({"kind": "exact"}, s("anything")) == [None]  # the row has no final answer


def test_contains_looks_for_the_reference_in_the_completion():
    assert scores({"kind": "contains"}, s("The capital is Paris.", " Paris "), s("Lyon", "Paris"), s("x", "  ")) \
        == [1.0, 0.0, None]
    assert scores({"kind": "contains", "caseSensitive": False, "field": "label"}, s("it is BILLING", label="billing")) \
        == [1.0]


def test_regex_searches_the_completion():
    assert scores({"kind": "regex", "pattern": r"<answer>\d+</answer>"}, s("so <answer>12</answer>"), s("12")) \
        == [1.0, 0.0]
    assert scores({"kind": "regex", "pattern": "^yes", "caseSensitive": False}, s("YES it is")) == [1.0]


def test_a_bad_pattern_is_refused_when_built_naming_it():
    with pytest.raises(Invalid) as caught:
        check_member({"kind": "regex", "pattern": "(unclosed"}, where="reward.terms[1]")
    assert caught.value.message.startswith("reward.terms[1].pattern: '(unclosed' is not a regular expression")
    with pytest.raises(Invalid, match=r"^pattern: a regex member needs"):
        build_builtin({"kind": "regex"})


@pytest.mark.parametrize("answer, expected", [
    ('```json\n{"label": "billing", "meta": {"urgent": false, "lang": "en"}}\n```',
     '{"label": "billing", "meta": {"urgent": true, "lang": "en"}}'),
    ('{"meta": {"lang": "en", "urgent": true}, "label": "billing"}', '{"label": "billing", "meta": {"urgent": true}}'),
    ("I think it is billing", '{"label": "billing"}'),
    ("Sure:\n[1, 2]", "[1, 2]"),
    (" Paris ", "Paris"),
    ("Lyon", "Paris"),
    ('{"a": {}}', '{"a": {}, "b": 1}'),
])
def test_json_field_match_is_the_json_label_match_grader(answer, expected):
    grade, match = json_label_match(answer, expected), json_field_match(answer, expected)
    assert (grade.score, grade.explanation, grade.fields) == (match.score, match.explanation, match.fields)
    assert scores({"kind": "jsonFieldMatch"}, s(answer, expected)) == [grade.score]
    assert scores({"kind": "jsonFieldMatch", "field": "want"}, s(answer, want=expected)) == [grade.score]


def test_json_field_match_scores_the_share_of_fields_and_takes_a_parsed_field():
    expected = '{"label": "billing", "meta": {"urgent": true, "lang": "en"}}'
    match = json_field_match('Here: {"label": "billing", "meta": {"urgent": false, "lang": "en"}}', expected)
    assert match.fields == {"label": True, "meta.urgent": False, "meta.lang": True}
    assert match.score == pytest.approx(2 / 3) and "meta.urgent" in match.explanation
    spec = {"kind": "jsonFieldMatch", "field": "label"}
    assert scores(spec, s('{"label": "billing", "x": 1}', label={"label": "billing"})) == [1.0]
    assert find_json("The answer is {not json} then [1, 2]") == [1, 2]


def test_numeric_compares_the_first_number_within_the_tolerance():
    spec = {"kind": "numeric"}
    assert scores(spec, s("It is 42 apples", "42"), s("41.9", "42"), s("no number", "42"), s("42", "forty-two")) \
        == [1.0, 0.0, 0.0, None]
    assert scores({"kind": "numeric", "tolerance": 0.5}, s("41.6 then 7", "42"), s("-3e2", " -300 ")) == [1.0, 1.0]
    assert scores({"kind": "numeric", "field": "answer"}, s("1,234.5 in total", answer=1234.5)) == [1.0]
    assert scores({"kind": "numeric", "pick": "last"}, s("3 + 4 = 7", "7"), s("3 + 4 = 7", "3")) == [1.0, 0.0]
    assert numbers_in("1,2 and 1,000 and .5") == [1.0, 2.0, 1000.0, 0.5]


TRIAGE = {"type": "object", "properties": {"label": {"enum": ["billing", "bug"]}, "urgent": {"type": "boolean"}},
          "required": ["label", "urgent"], "additionalProperties": False}


def test_json_schema_scores_a_whole_answer_its_schema_accepts():
    answers = [' {"label": "bug", "urgent": true}\n', '{"label": "bug"}', '{"label": "x", "urgent": true}',
               'Sure: {"label": "bug", "urgent": true}', "[" * 100_000, ""]
    assert scores({"kind": "jsonSchema", "schema": TRIAGE}, *map(s, answers)) == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "array", "items": [{"type": "string"}]}
    assert scores({"kind": "jsonSchema", "schema": draft7}, s('["a", 1]'), s("[1]")) == [1.0, 0.0]


def test_a_grpo_plan_s_json_schema_term_reaches_its_member_as_schema():
    from optimize.schemas.plans import RewardTerm

    term = RewardTerm.model_validate({"kind": "jsonSchema", "schema": TRIAGE})
    spec = term.model_dump(by_alias=True, mode="json", exclude_none=True)
    assert spec == {"kind": "jsonSchema", "schema": TRIAGE, "weight": 1.0}
    assert scores(spec, s('{"label": "billing", "urgent": false}')) == [1.0]


def test_length_is_a_penalty_past_its_target():
    spec = {"kind": "length", "target": 10, "max": 20}
    assert scores(spec, s(""), s("x" * 10), s("x" * 15), s("x" * 20), s("x" * 500)) == [0.0, 0.0, -0.5, -1.0, -1.0]


@pytest.mark.parametrize("spec, message", [
    ({"kind": "length", "target": 10}, "reward.terms[0].max: a length member needs"),
    ({"kind": "length", "target": 10, "max": 10}, "reward.terms[0].max: must be more than target (10)"),
    ({"kind": "length", "target": -1, "max": 10}, "reward.terms[0].target: expected a whole number"),
    ({"kind": "length", "target": True, "max": 10}, "reward.terms[0].target: expected a whole number"),
    ({"kind": "jsonSchema"}, "reward.terms[0].schema: a jsonSchema member needs the JSON schema"),
    ({"kind": "jsonSchema", "schema": "object"}, "reward.terms[0].schema: a jsonSchema member needs"),
    ({"kind": "jsonSchema", "schema": {"type": "objekt"}}, "reward.terms[0].schema: not a JSON schema at type"),
    ({"kind": "jsonSchema", "schema": {"properties": {"a": {"minLength": -1}}}},
     "reward.terms[0].schema: not a JSON schema at properties/a/minLength"),
    ({"kind": "numeric", "tolerance": -1}, "reward.terms[0].tolerance: expected a number 0 or more"),
    ({"kind": "numeric", "pick": "middle"}, "reward.terms[0].pick: expected first or last"),
    ({"kind": "exact", "caseSensitive": "no"}, "reward.terms[0].caseSensitive: expected true or false"),
    ({"kind": "exact", "field": "messages"}, "reward.terms[0].field: the messages are the prompt"),
    ({"kind": "exact", "pattern": "x"}, "reward.terms[0].pattern: not an option of an exact member"),
    ({"kind": "exact", "weight": float("nan")}, "reward.terms[0].weight: expected a finite number"),
    ({"kind": "exact", "clip": [1, 0]}, "reward.terms[0].clip: expected [low, high]"),
    ({"kind": "fuzzy"}, "reward.terms[0].kind: 'fuzzy' is not a scoring member kind"),
    ({"kind": "rule", "function": "reward"}, "reward.terms[0].bundle: a rule member needs the scoring bundle"),
    ({"kind": "rule", "bundle": "ns/b"}, "reward.terms[0].function: a rule member needs the function"),
    ({"kind": "rule", "bundle": "ns/b", "function": "reward.py"}, "reward.terms[0].function: 'reward.py' names a file"),
    ({"kind": "rule", "bundle": "ns/b", "function": "reward:1x"}, "reward.terms[0].function: 'reward:1x' does not"),
    ({"kind": "rule", "bundle": "ns/b", "function": "r", "timeLimitSeconds": 0}, "reward.terms[0].timeLimitSeconds"),
    ("exact", "reward.terms[0]: expected an object with a `kind`"),
])
def test_bad_specs_are_refused_naming_the_field(spec, message):
    with pytest.raises(Invalid) as caught:
        check_term(spec, "reward.terms[0]")
    assert caught.value.message.startswith(message), caught.value.message


def test_shared_keys_and_null_values_are_accepted():
    spec = {"kind": "exact", "name": "right", "weight": 2.0, "clip": [0, 1], "field": None, "pattern": None}
    check_member(spec)
    assert scores(spec, s("a", "a")) == [1.0]
    check_member({"kind": "rule", "bundle": "ns/rewards:v2", "function": "pkg.reward:score", "timeLimitSeconds": 2,
                  "memoryLimitMb": 512})


def test_a_failure_on_one_sample_is_its_error():
    got = build_builtin({"kind": "exact", "field": "answer"}).score([s("x", answer={1, 2}), s("x", answer="x")])
    assert got[0].value is None and got[0].error.startswith("TypeError") and got[1] == Score(1.0)


def test_build_member_builds_built_ins_and_wants_a_rule_bundle_resolved():
    with build_member({"kind": "contains", "field": "label"}) as member:
        assert member.score([s("billing!", label="billing")]) == [Score(1.0)]
    with pytest.raises(Invalid, match=r"^config.reward.terms\[2\].bundle: the scoring bundle 'ns/b' was not"):
        build_member({"kind": "rule", "bundle": "ns/b", "function": "reward"}, where="config.reward.terms[2]")


def test_missing_fields_names_the_lines_lacking_the_reference():
    rows = [{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], "answer": 1},
            {"messages": [{"role": "user", "content": "q"}], "answer": None},
            {"messages": [{"role": "user", "content": "q"}], "meta": {"answer": 2}}]
    assert missing_fields({"kind": "numeric", "field": "answer"}, rows) == [(2, "answer"), (3, "answer")]
    assert missing_fields({"kind": "exact"}, rows, first_line=10) == [(11, "expected"), (12, "expected")]
    assert missing_fields({"kind": "exact", "field": "meta.answer"}, rows, limit=1) == [(1, "meta.answer")]
    assert missing_fields({"kind": "regex", "pattern": "x"}, rows) == []


def test_a_row_splits_into_prompt_expected_answer_and_fields():
    row = {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"},
                        {"role": "assistant", "content": [{"type": "text", "text": "4"}]}], "answer": 4, "id": "r1"}
    sample = sample_from_row(row, "four")
    assert sample.prompt == row["messages"][:2] and sample.expected == "4" and sample.completion == "four"
    assert sample.fields == {"answer": 4, "id": "r1"}
    prompt_only = sample_from_row({"messages": row["messages"][:2]}, "x")
    assert prompt_only.expected is None and len(prompt_only.prompt) == 2


def within(seconds: float, work, *args):
    """`work(*args)`, asserted to end within a bound generous enough for any machine (the unbounded form took
    minutes): what is tested is that it ends, not how fast."""
    import time

    started = time.monotonic()
    result = work(*args)
    assert time.monotonic() - started < seconds
    return result


@pytest.mark.parametrize("hostile", [
    "[" * 1_000_000,  # nesting deeper than the stack at every bracket
    '["' + "[" * 1_000_000,  # an unterminated string, then the same
    "[x" * 500_000,  # a bracket that opens nothing, half a million times
    '{"a":' * 300_000,  # objects opened and never closed
    '[{"a": ' * 100 + '"' + "x" * 900_000,  # an unterminated string read to the end from each bracket
    ("[" + "1" * 5000) * 200,  # integers past Python's digit limit
    "{" + " " * 2_000_000 + "}",  # past the characters searched: no JSON there
])
def test_json_in_hostile_text_is_searched_within_its_bounds(hostile):
    assert within(5, find_json, hostile) is None
    assert within(5, json_field_match, hostile, '{"label": "a"}').score == 0.0
    assert within(5, json_field_match, '{"label": "a"}', hostile).score == 0.0  # compared as text
    assert scores({"kind": "jsonFieldMatch"}, s(hostile, '{"label": "a"}')) == [0.0]


def test_json_after_hostile_text_is_still_found_within_the_bounds_and_not_past_them():
    assert find_json("[x" * 20_000 + '{"label": "a"}') == {"label": "a"}
    assert find_json("[" * 500 + ' {"label": "a"}') == {"label": "a"}  # nested, never closed
    long_value = {"label": "a", "text": "y" * 300_000}  # decoded through windows that double: the same value
    assert find_json("prose [1, 2 then " + json.dumps(long_value)) == long_value
    assert find_json("x" * 1_000_000 + '{"label": "a"}') is None  # past the characters searched
    assert find_json("[x" * 100_000 + '{"label": "a"}') is None  # past what the attempts may read together


def test_json_cut_anywhere_decodes_as_the_whole_text_does():
    """A window that ends inside a token (a literal, a number, an escape) is widened, never read as a failure."""
    for value in ([-1.5e+300, True, False, None], {"a": "\u00e9\\\U0001d11e", "b": float("-inf")},
                  [float("nan"), 12345678901234567890]):
        text = json.dumps(value, ensure_ascii=True)
        for filler in range(0, 140):
            found = find_json("{x " + " " * filler + text)
            assert json.dumps(found) == json.dumps(value)


def test_a_deep_json_value_is_flattened_without_recursion():
    depth = 800
    value = json.loads('{"a": ' * depth + "1" + "}" * depth)
    match = within(5, json_field_match, json.dumps(value), value)
    assert match.score == 1.0 and list(match.fields) == [".".join(["a"] * depth)]


@pytest.mark.parametrize("hostile", ["1,111" * 200_000 + "1", ",111" * 250_000, "1." * 500_000,
                                     "1e" * 500_000, "1,111,1111 " * 100_000, " " * 1_000_000 + "x"])
def test_numbers_in_hostile_text_are_read_in_one_pass(hostile):
    assert within(5, numbers_in, hostile) is not None
    assert len(within(5, scores, {"kind": "numeric", "pick": "last"}, s(hostile, "7"))) == 1
    assert within(5, scores, {"kind": "contains"}, s(hostile, "1,111,1112")) == [0.0]
    assert within(5, scores, {"kind": "exact", "caseSensitive": False}, s(hostile, "y")) == [0.0]
