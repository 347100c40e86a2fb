"""The built-in scoring members: each is built from a plain dict spec (camelCase keys, as a run plan writes them)
and scores a batch of samples, `list[Sample] -> list[Score]`, in this process.

| kind             | score                                                                                      |
|------------------|--------------------------------------------------------------------------------------------|
| `exact`          | 1.0 when the completion, stripped, equals the reference, stripped; else 0.0                |
| `contains`       | 1.0 when the reference (stripped) occurs in the completion; else 0.0                       |
| `regex`          | 1.0 when `pattern` matches somewhere in the completion; else 0.0 (linear-time matching,   |
|                  | `optimize.scoring.patterns`: Python's syntax without backreferences or lookaround)         |
| `jsonFieldMatch` | the share of the reference JSON object's fields (nested by dotted path) the completion's   |
|                  | JSON matches exactly; code fences and prose around the JSON are ignored (the evaluation     |
|                  | grader `json-label-match`); a reference holding no JSON is compared as text (1.0 or 0.0)   |
| `numeric`        | 1.0 when the first (`pick: last`: the last) number in the completion is within `tolerance`  |
|                  | (absolute, default 0) of the reference number; else 0.0                                    |
| `length`         | a penalty: 0 up to `target` characters, then linearly down to -1 at `max` characters       |
| `jsonSchema`     | 1.0 when the whole completion (stripped) is JSON that `schema` (a JSON schema, validated   |
|                  | by the `jsonschema` package under the draft its `$schema` names, 2020-12 by default)      |
|                  | accepts; else 0.0 — what an endpoint's structured output is held to                        |

Options: `caseSensitive` (exact, contains, regex; default true); `field` (exact, contains, numeric,
jsonFieldMatch): the row field holding the reference — a top-level field's name, or a dotted path into a
field's object (`metadata.answer`) — instead of the row's final assistant message (`expected`).

A member does not apply to a sample (value None, no error) when its reference is missing: the row has no final
assistant message, or lacks the named field (or holds null there), or — for `numeric` — the reference is not a
number; `contains` does not apply to an empty reference either (every answer would contain it).
`missing_fields` names the lines of a dataset where that happens, so admission can refuse or warn before a run.

Hostile text: no member's work grows faster than the text it reads. `exact`, `contains`, `numeric` and
`length` read it once; `regex` searches it with RE2 (`optimize.scoring.patterns`, which bounds the text one search
reads). `jsonFieldMatch` (and a judge's reply, `optimize.scoring.judge`) searches only the first `JSON_TEXT_CHARS`
(1,000,000) characters for JSON, and gives up — no JSON — once its attempts at each `{` or `[` have read
`JSON_READ_CHARS` (4,000,000) characters together; a value nested deeper than the interpreter's stack is no JSON.
Those bounds change what an ordinary answer scores only where its JSON starts past its first million characters or
after tens of thousands of brackets that open no JSON.

Every spec may also carry the keys a reward term or grader shares (`kind`, `name`, `weight`, `clip`); any other
key is refused by name, and a key whose value is null counts as absent (a plan's model dumped with its defaults).
`check_member` validates a spec (the built-ins; `rule`, a scoring bundle's function, whose process is run by
`optimize.scoring.bundle_runner`; and `judge`, a model asked to grade the answer, `optimize.scoring.judge`) with
messages that name the field's path. `clip` is checked here ([low, high])
but applied by the caller (a reward term), as `weight` is.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for

from optimize.core.errors import Invalid
from optimize.scoring.patterns import MAX_PATTERN_CHARS, PatternRefused, compile_pattern
from optimize.scoring.samples import Sample, Score, sample_from_row

BUILTIN_KINDS = ("exact", "contains", "regex", "jsonFieldMatch", "numeric", "length", "jsonSchema")
RULE_KIND = "rule"
JUDGE_KIND = "judge"  # a model asked to grade the answer (`optimize.scoring.judge`)
KINDS = (*BUILTIN_KINDS, RULE_KIND, JUDGE_KIND)
SHARED_KEYS = ("kind", "name", "weight", "clip")  # what a reward term or a grader adds to any member's spec
MAX_NAME_CHARS = 64
_REFERENCED = ("exact", "contains", "numeric", "jsonFieldMatch")  # kinds that compare with a reference
_OPTIONS: dict[str, tuple[str, ...]] = {
    "exact": ("caseSensitive", "field"),
    "contains": ("caseSensitive", "field"),
    "regex": ("pattern", "caseSensitive"),
    "jsonFieldMatch": ("field",),
    "numeric": ("tolerance", "pick", "field"),
    "length": ("target", "max"),
    "jsonSchema": ("schema",),
    RULE_KIND: ("bundle", "function", "timeLimitSeconds", "memoryLimitMb"),
    JUDGE_KIND: ("model", "instructions"),
}
MAX_INSTRUCTIONS_CHARS = 8000
MAX_TIME_LIMIT_S = 600.0
MIN_MEMORY_LIMIT_MB, MAX_MEMORY_LIMIT_MB = 64, 1024 * 1024
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
JSON_TEXT_CHARS = 1_000_000  # the characters of an answer (or reference) searched for its JSON
JSON_READ_CHARS = 4_000_000  # the characters the search's attempts may read together before it gives up
_FIRST_WINDOW = 128  # the characters an attempt is first given (each attempt reads at least this many)
_LONGEST_TOKEN = 16  # a failure this close to a window's end may be its cut (-Infinity, 1.5e+, \uXXXX)
_OPENING = re.compile(r"[{\[]")
_DECODER = json.JSONDecoder()
_NO_VALUE = object()


# --- json-label-match: the JSON in an answer compared field by field ----------------------------------------------


def find_json(text: str) -> Any | None:
    """The first JSON object (or array) in the text: inside a code fence or between prose, else None.

    Bounded on any text (see the module's text on hostile answers): only the first `JSON_TEXT_CHARS` characters are
    searched, and the search gives up (None) once its attempts have read `JSON_READ_CHARS` characters together."""
    text = text[:JSON_TEXT_CHARS]
    budget = JSON_READ_CHARS
    for opening in _OPENING.finditer(text):
        value, read = _decode_at(text, opening.start())
        if value is not _NO_VALUE:
            return value
        budget -= read
        if budget <= 0:
            break
    return None


def _decode_at(text: str, index: int) -> tuple[Any, int]:
    """(the JSON value that starts at `index`, or _NO_VALUE; the characters read to learn it).

    The decoder is given a window of the text from `index`, doubled while a failure may be the window's cut (an
    unterminated string, or an error within a token's length of its end), so an attempt reads about as much as it
    parses: the decoder's error, given the whole text, counts the lines before the failure, which made every
    attempt cost the length of the text before it. What a window decodes is what the whole text decodes."""
    size, read = _FIRST_WINDOW, 0
    while True:
        window = text[index:index + size]
        read += len(window)
        try:
            return _DECODER.raw_decode(window)[0], read
        except json.JSONDecodeError as error:
            cut = index + size < len(text) and (error.pos >= len(window) - _LONGEST_TOKEN
                                                or error.msg.startswith("Unterminated string"))
        except ValueError:  # an integer past Python's digit limit
            cut = False
        except RecursionError:  # nesting deeper than the stack: costly in itself, counted as the rest of the text
            return _NO_VALUE, max(read, len(text) - index)
        if not cut:
            return _NO_VALUE, read
        size *= 2


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Leaves of a JSON object by dotted path (lists and scalars are leaves), in the object's order. Walked with a
    stack of its own, not by recursion: each leaf is stored once, however deep it is."""
    if not isinstance(value, dict) or not value:
        return {prefix or "$": value}
    found: dict[str, Any] = {}
    stack = [(prefix, iter(value.items()))]
    while stack:
        path, items = stack[-1]
        for key, item in items:
            here = f"{path}.{key}" if path else str(key)
            if isinstance(item, dict) and item:
                stack.append((here, iter(item.items())))
                break
            found[here] = item
        else:
            stack.pop()
    return found


@dataclass(frozen=True)
class FieldMatch:
    """How an answer's JSON matches the expected JSON: the score, a sentence, and each expected field's outcome."""

    score: float
    explanation: str
    fields: dict[str, bool] = field(default_factory=dict)  # expected field path -> matched


def json_field_match(answer: str, expected: Any) -> FieldMatch:
    """The share of the expected JSON's fields the answer's JSON matches exactly. `expected` is text (its first JSON
    value is the reference; text holding no JSON is compared with the answer as text) or an already parsed value."""
    if isinstance(expected, str):
        wanted = find_json(expected)
        if wanted is None:
            matched = answer.strip() == expected.strip()
            return FieldMatch(1.0 if matched else 0.0, "the text matches" if matched else "the text differs")
    else:
        wanted = expected
    got = find_json(answer)
    if got is None:
        fields = {path: False for path in flatten(wanted)}
        return FieldMatch(0.0, "the answer holds no JSON", fields)
    have = flatten(got)
    fields = {path: path in have and have[path] == value for path, value in flatten(wanted).items()}
    missed = [path for path, ok in fields.items() if not ok]
    explanation = "every field matches" if not missed else f"{len(missed)} of {len(fields)} field(s) differ: " \
        + ", ".join(missed[:5])
    return FieldMatch(sum(fields.values()) / len(fields), explanation, fields)


# --- numbers -------------------------------------------------------------------------------------------------------

_NUMBER = r"[-+]?(?:(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?"
_NUMBER_IN_TEXT = re.compile(_NUMBER)
_WHOLE_NUMBER = re.compile(rf"\s*{_NUMBER}\s*")


def _to_float(text: str) -> float:
    return float(text.replace(",", ""))


def numbers_in(text: str) -> list[float]:
    """Every number written in the text, in order (`1,234.5` is one number; `1,2` is two)."""
    return [_to_float(match) for match in _NUMBER_IN_TEXT.findall(text)]


def as_number(value: Any) -> float | None:
    """A reference read as a number: a JSON number, or text that is one number (thousands separators allowed)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str) and _WHOLE_NUMBER.fullmatch(value):
        number = _to_float(value.strip())
    else:
        return None
    return number if math.isfinite(number) else None


# --- references ----------------------------------------------------------------------------------------------------

_MISSING = object()


def lookup(fields: Mapping[str, Any], name: str) -> Any:
    """A row field by name — a top-level key, else a dotted path into nested objects — or `_MISSING`."""
    if name in fields:
        return fields[name]
    value: Any = fields
    for part in name.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return _MISSING
        value = value[part]
    return value


def reference_of(sample: Sample, field_name: str | None) -> Any:
    """The member's reference for a sample: the named field's value, else the row's expected text; None if absent."""
    if field_name is None:
        return sample.expected
    value = lookup(sample.fields, field_name)
    return None if value is _MISSING else value


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


# --- members -------------------------------------------------------------------------------------------------------


class Builtin:
    """A built-in member: scores each sample in this process; a failure on one sample is that sample's error."""

    kind = ""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.spec = present(spec)
        self.field: str | None = self.spec.get("field")

    def score(self, samples: list[Sample]) -> list[Score]:
        scores = []
        for sample in samples:
            try:
                scores.append(self.score_one(sample))
            except Exception as error:  # noqa: BLE001 - recorded on the sample, never raised
                scores.append(Score(None, f"{type(error).__name__}: {error}"[:500]))
        return scores

    def score_one(self, sample: Sample) -> Score:
        raise NotImplementedError

    def check(self) -> None:
        """Nothing to load: a built-in member is checked when its spec is."""

    def close(self) -> None:
        """Nothing to release."""

    def __enter__(self) -> Builtin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _TextCompare(Builtin):
    def __init__(self, spec: Mapping[str, Any]) -> None:
        super().__init__(spec)
        self.case_sensitive = spec.get("caseSensitive", True)

    def _fold(self, text: str) -> str:
        return text if self.case_sensitive else text.casefold()


class Exact(_TextCompare):
    kind = "exact"

    def score_one(self, sample: Sample) -> Score:
        reference = reference_of(sample, self.field)
        if reference is None:
            return Score(None)
        matched = self._fold(sample.completion.strip()) == self._fold(_as_text(reference).strip())
        return Score(1.0 if matched else 0.0)


class Contains(_TextCompare):
    kind = "contains"

    def score_one(self, sample: Sample) -> Score:
        reference = reference_of(sample, self.field)
        wanted = None if reference is None else _as_text(reference).strip()
        if not wanted:
            return Score(None)
        return Score(1.0 if self._fold(wanted) in self._fold(sample.completion) else 0.0)


class Regex(Builtin):
    kind = "regex"

    def __init__(self, spec: Mapping[str, Any]) -> None:
        super().__init__(spec)
        self.pattern = compile_pattern(spec["pattern"], case_sensitive=spec.get("caseSensitive", True))

    def score_one(self, sample: Sample) -> Score:
        # a completion longer than one search may read (`TextTooLong`) leaves the sample unscored, saying why
        return Score(1.0 if self.pattern.search(sample.completion) else 0.0)


class JsonFieldMatch(Builtin):
    kind = "jsonFieldMatch"

    def score_one(self, sample: Sample) -> Score:
        reference = reference_of(sample, self.field)
        if reference is None:
            return Score(None)
        return Score(json_field_match(sample.completion, reference).score)


class Numeric(Builtin):
    kind = "numeric"

    def __init__(self, spec: Mapping[str, Any]) -> None:
        super().__init__(spec)
        self.tolerance = float(spec.get("tolerance", 0))
        self.last = spec.get("pick", "first") == "last"

    def score_one(self, sample: Sample) -> Score:
        wanted = as_number(reference_of(sample, self.field))
        if wanted is None:
            return Score(None)
        found = numbers_in(sample.completion)
        if not found:
            return Score(0.0)
        got = found[-1] if self.last else found[0]
        return Score(1.0 if abs(got - wanted) <= self.tolerance else 0.0)


class Length(Builtin):
    kind = "length"

    def __init__(self, spec: Mapping[str, Any]) -> None:
        super().__init__(spec)
        self.target, self.max = int(spec["target"]), int(spec["max"])

    def score_one(self, sample: Sample) -> Score:
        over = len(sample.completion) - self.target
        if over <= 0:
            return Score(0.0)
        return Score(-min(1.0, over / (self.max - self.target)))


class JsonSchema(Builtin):
    kind = "jsonSchema"

    def __init__(self, spec: Mapping[str, Any]) -> None:
        super().__init__(spec)
        self.validator = schema_validator(spec["schema"])

    def score_one(self, sample: Sample) -> Score:
        text = sample.completion.strip()
        if len(text) > JSON_TEXT_CHARS:
            return Score(0.0)
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):  # no JSON, or nested deeper than the stack
            return Score(0.0)
        return Score(1.0 if self.validator.is_valid(value) else 0.0)


def schema_validator(schema: Mapping[str, Any]) -> Any:
    """The validator of a JSON schema, under the draft its `$schema` names (2020-12 when it names none); SchemaError
    when it is no schema of that draft."""
    cls = validator_for(schema, default=validator_for({"$schema": "https://json-schema.org/draft/2020-12/schema"}))
    cls.check_schema(schema)
    return cls(schema)


_BUILTINS: dict[str, type[Builtin]] = {cls.kind: cls for cls in (Exact, Contains, Regex, JsonFieldMatch, Numeric,
                                                                   Length, JsonSchema)}


def build_builtin(spec: Mapping[str, Any], *, where: str = "") -> Builtin:
    """A built-in member from its spec, checked first (Invalid naming the field otherwise)."""
    check_member(spec, where=where)
    spec = present(spec)
    kind = spec["kind"]
    if kind not in _BUILTINS:
        raise Invalid(f"{_path(where, 'kind')}: {kind!r} is not a built-in member; build it with "
                      "optimize.scoring.build_member")
    return _BUILTINS[kind](spec)


# --- validation ----------------------------------------------------------------------------------------------------


def present(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The spec without its null-valued keys (which count as absent)."""
    return {key: value for key, value in spec.items() if value is not None}


def _path(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def parse_function(text: str) -> tuple[str, str]:
    """`MODULE[:FUNCTION]` as (module, function): MODULE a dotted path inside the bundle (`reward`, `pkg.reward`),
    FUNCTION a name in it (default `compute_score`). Raises ValueError saying what is wrong."""
    module, _, function = str(text).strip().partition(":")
    function = function or "compute_score"
    if module.endswith(".py"):
        raise ValueError(f"{text!r} names a file: write the module's dotted path without .py, e.g. "
                         f"{module[:-3]}:{function}")
    if not module or not all(_IDENTIFIER.fullmatch(part) for part in module.split(".")):
        raise ValueError(f"{text!r} does not name a module: write MODULE[:FUNCTION], e.g. reward or "
                         "pkg.reward:compute_score (the module's dotted path inside the bundle, without .py)")
    if not _IDENTIFIER.fullmatch(function):
        raise ValueError(f"{text!r} does not name a function after the colon: write MODULE[:FUNCTION], e.g. "
                         "reward:compute_score")
    return module, function


def check_member(spec: Any, *, where: str = "", extra_keys: Iterable[str] = ()) -> None:
    """Validate a member's spec, raising Invalid whose message starts with the field's path (`where` is the spec's
    own path, e.g. `reward.terms[1]`, giving `reward.terms[1].pattern: ...`). Keys other than the kind's options,
    `kind`, `name`, `weight` and `extra_keys` are refused by name."""
    if not isinstance(spec, Mapping):
        raise Invalid(f"{where or 'member'}: expected an object with a `kind`, got {type(spec).__name__}")
    spec = present(spec)
    kind = spec.get("kind")
    if kind not in KINDS:
        raise Invalid(f"{_path(where, 'kind')}: {kind!r} is not a scoring member kind; use one of {', '.join(KINDS)}")
    allowed = {*SHARED_KEYS, *_OPTIONS[kind], *extra_keys}
    unknown = sorted(str(key) for key in spec if key not in allowed)
    if unknown:
        article = "an" if kind[0] in "aeiou" else "a"
        raise Invalid(f"{_path(where, unknown[0])}: not an option of {article} {kind} member; its options are "
                      f"{', '.join(_OPTIONS[kind])}")

    def refuse(key: str, message: str) -> Invalid:
        return Invalid(f"{_path(where, key)}: {message}")

    if "name" in spec and not (isinstance(spec["name"], str) and 0 < len(spec["name"].strip()) <= MAX_NAME_CHARS):
        raise refuse("name", f"expected a name of 1 to {MAX_NAME_CHARS} characters")
    if "weight" in spec and not _number(spec["weight"]):
        raise refuse("weight", f"expected a finite number, got {spec['weight']!r}")
    if "clip" in spec:
        clip = spec["clip"]
        if not (isinstance(clip, (list, tuple)) and len(clip) == 2 and all(_number(v) for v in clip)
                and clip[0] <= clip[1]):
            raise refuse("clip", f"expected [low, high], two finite numbers with low <= high, got {clip!r}")
    if "caseSensitive" in spec and not isinstance(spec["caseSensitive"], bool):
        raise refuse("caseSensitive", f"expected true or false, got {spec['caseSensitive']!r}")
    if "field" in spec:
        name = spec["field"]
        if not isinstance(name, str) or not name.strip():
            raise refuse("field", f"expected the name of a row field, got {name!r}")
        if name == "messages":
            raise refuse("field", "the messages are the prompt and the expected answer, not a reference field; "
                                  "leave `field` out to compare with the row's final assistant message")
    if kind == "regex":
        pattern = spec.get("pattern")
        if not isinstance(pattern, str) or not pattern:
            raise refuse("pattern", "a regex member needs a regular expression (`pattern`)")
        if len(pattern) > MAX_PATTERN_CHARS:
            raise refuse("pattern", f"the pattern has {len(pattern)} characters; at most {MAX_PATTERN_CHARS}")
        try:
            compile_pattern(pattern, case_sensitive=spec.get("caseSensitive", True))
        except PatternRefused as error:
            raise refuse("pattern", str(error)) from None
    elif kind == "numeric":
        if "tolerance" in spec and not (_number(spec["tolerance"]) and spec["tolerance"] >= 0):
            raise refuse("tolerance", f"expected a number 0 or more (an absolute difference), got "
                                      f"{spec['tolerance']!r}")
        if spec.get("pick", "first") not in ("first", "last"):
            raise refuse("pick", f"expected first or last (which number of the completion), got {spec['pick']!r}")
    elif kind == "length":
        for key in ("target", "max"):
            value = spec.get(key)
            if key not in spec:
                raise refuse(key, "a length member needs `target` (characters without penalty) and `max` "
                                  "(characters at the full penalty of -1)")
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise refuse(key, f"expected a whole number of characters, 0 or more, got {value!r}")
        if spec["max"] <= spec["target"]:
            raise refuse("max", f"must be more than target ({spec['target']}), got {spec['max']}")
    elif kind == "jsonSchema":
        schema = spec.get("schema")
        if not isinstance(schema, Mapping):
            raise refuse("schema", "a jsonSchema member needs the JSON schema its answers must satisfy (`schema`, "
                                   "an object)")
        try:
            schema_validator(schema)
        except SchemaError as error:
            where_in = "/".join(str(part) for part in error.path)
            raise refuse("schema", f"not a JSON schema{f' at {where_in}' if where_in else ''}: {error.message}"
                         ) from None
    elif kind == RULE_KIND:
        bundle = spec.get("bundle")
        if not isinstance(bundle, str) or not bundle.strip():
            raise refuse("bundle", "a rule member needs the scoring bundle that holds its function (`bundle`, a "
                                   "registry reference)")
        if "function" not in spec:
            raise refuse("function", "a rule member needs the function to call (`function`: MODULE[:FUNCTION], "
                                     "e.g. reward:compute_score)")
        try:
            parse_function(spec["function"])
        except ValueError as error:
            raise refuse("function", str(error)) from None
        limit = spec.get("timeLimitSeconds")
        if "timeLimitSeconds" in spec and not (_number(limit) and 0 < limit <= MAX_TIME_LIMIT_S):
            raise refuse("timeLimitSeconds", f"expected seconds per sample, more than 0 and at most "
                                             f"{MAX_TIME_LIMIT_S:g}, got {limit!r}")
        memory = spec.get("memoryLimitMb")
        if "memoryLimitMb" in spec and (isinstance(memory, bool) or not isinstance(memory, int)
                                        or not MIN_MEMORY_LIMIT_MB <= memory <= MAX_MEMORY_LIMIT_MB):
            raise refuse("memoryLimitMb", f"expected whole MiB from {MIN_MEMORY_LIMIT_MB} to "
                                          f"{MAX_MEMORY_LIMIT_MB}, got {memory!r}")
    elif kind == JUDGE_KIND:
        model = spec.get("model")
        if not isinstance(model, str) or not model.strip():
            raise refuse("model", "a judge member needs the model that grades the answers (`model`: a base model "
                                  "of the catalog, or a registered model NS/NAME[:vN])")
        instructions = spec.get("instructions")
        if "instructions" in spec and not (isinstance(instructions, str) and instructions.strip()):
            raise refuse("instructions", "expected the judge's instructions as text (leave them out for the "
                                         "built-in grading instructions)")
        if isinstance(instructions, str) and len(instructions) > MAX_INSTRUCTIONS_CHARS:
            raise refuse("instructions", f"the instructions have {len(instructions)} characters; at most "
                                         f"{MAX_INSTRUCTIONS_CHARS}")


def referenced_field(spec: Mapping[str, Any]) -> str | None:
    """What a member compares with: a row field's name, `expected` (the row's final assistant message), or None
    when it compares with nothing of the row (`regex`, `length`, `rule`, `judge`)."""
    kind = spec.get("kind")
    if kind not in _REFERENCED:
        return None
    return spec.get("field") or "expected"


def missing_fields(spec: Mapping[str, Any], rows: Iterable[Mapping[str, Any]], *, first_line: int = 1,
                   limit: int | None = None) -> list[tuple[int, str]]:
    """(line, field) for each row (numbered from `first_line`) lacking the reference the member compares with: the
    named field (absent, or null), or — without `field` — the row's final assistant message (reported as
    `expected`). Such rows are not scored by the member (value None). At most `limit` entries."""
    name = referenced_field(spec)
    if name is None:
        return []
    missing = []
    for line, row in enumerate(rows, start=first_line):
        if limit is not None and len(missing) >= limit:
            break
        if name == "expected" and spec.get("field") is None:
            absent = sample_from_row(row, "").expected is None
        else:
            absent = lookup({k: v for k, v in row.items() if k != "messages"}, name) in (_MISSING, None)
        if absent:
            missing.append((line, name))
    return missing
