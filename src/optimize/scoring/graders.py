"""Graders: how one answer is scored against its expected answer — an evaluation's `--grader` and a distillation's
`--accept-grader`, one grammar and one meaning for both (`optimize.evaluation.graders` makes an evaluation's report
from the grades).

`json-label-match` (the default) compares the JSON object in the answer with the expected answer's, field by
field (nested fields by dotted path), tolerating code fences and prose around it: the score is the share of the
expected fields the answer matches exactly. An expected answer that holds no JSON is compared as text.
`http:URL` posts `{input, output, expected}` to the user's evaluator, which answers `score` (0..1) or a boolean
`ok`/`passed`, and an optional `explanation`; an answer of more than `EVALUATOR_ANSWER_BYTES` (1 MiB) is not read
on (unscored). An unscored example (`score: None`, e.g. an evaluator that cannot be reached) is left out of the
mean. `model:REF` asks a judge model (a base model or a registered adapter, served
for an evaluation beside the model evaluated) to grade the answer and reply with a JSON
score; it sees the input and the output, not the expected answer. A reply without a score between 0 and 1 leaves
the example unscored, quoting the reply. `bundle:REF#MODULE[:FUNCTION]` calls a function of a registered scoring
bundle (`optimize.scoring.BundleRunner`, in a separate limited process) on each answer: its number from 0 to 1 is
the score; None, a number outside 0..1, an exception or a limit hit leaves the example unscored, saying why.
The built-in scoring members a reward term uses are graders too: `exact` and `contains` (against the expected
answer), `regex:PATTERN` (the answer matches the pattern) and `numeric[:TOLERANCE]` (the answer's first number
within the absolute tolerance, default 0, of the expected one); `length`, a penalty from -1 to 0, is a reward
term only.

No grader's work in this process grows faster than the answer and the expected answer: the JSON an answer (an
expected answer, a judge's reply) holds is searched within the bounds `optimize.scoring.members` states (its first
1,000,000 characters, 4,000,000 characters read by its attempts together), and its fields are walked once.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from contextlib import ExitStack, closing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from optimize.core.errors import Invalid
from optimize.core.refs import parse_reference
from optimize.scoring.judge import JUDGE_INSTRUCTIONS, judge_messages  # noqa: F401 - re-exported: a judge's prompt
from optimize.scoring.judge import judge_grade as read_judge_reply
from optimize.scoring.members import check_member, find_json, flatten, json_field_match, parse_function  # noqa: F401 - flatten stays importable here

DEFAULT_GRADER = "json-label-match"
GRADER_FORMS = (DEFAULT_GRADER, "exact", "contains", "regex:PATTERN", "numeric[:TOLERANCE]", "http:URL", "model:REF",
                "bundle:REF#MODULE[:FUNCTION]")
GRADER_EXAMPLES = ("e.g. --grader http:https://scores.example.com/score, --grader model:NS/NAME or --grader "
                   "bundle:NS/NAME#reward")
BUNDLE_FORM = "bundle:NS/NAME[:vN|:ALIAS]#MODULE[:FUNCTION]"
MOST_GRADER_CHARS = 400
DEFAULT_FUNCTION = "compute_score"
EVALUATOR_ANSWER_BYTES = 1024 * 1024  # an http evaluator's answer read at most (a score and an explanation)


def parse_grader(spec: str | None) -> str:
    """The grader a spec names, spelled as it is kept (`http:URL`, `model:REF`, ...); a bare http(s) URL is the
    `http:` grader at that URL. Anything else is refused (Invalid) naming the graders there are."""
    given = spec = (spec or DEFAULT_GRADER).strip()
    if spec == DEFAULT_GRADER:
        return spec
    if len(spec) > MOST_GRADER_CHARS:  # an evaluation keeps it, resolved, in a column of 500
        raise Invalid(f"the grader is {len(spec):,} characters long; a grader is at most {MOST_GRADER_CHARS}",
                      hint="shorten its pattern or URL, or put the check in a scoring bundle (bundle:REF#MODULE)")
    builtin = builtin_member(spec)
    if builtin is not None:
        return builtin[0]
    if spec.startswith(("http://", "https://")):
        spec = f"http:{spec}"
    kind, _, rest = spec.partition(":")
    rest = rest.strip()
    if kind == "http" and rest.startswith(("http://", "https://")) and _host(rest):
        return f"http:{rest}"
    if kind == "model" and rest:
        return f"model:{rest}"
    if kind == "bundle":
        bundle = parse_bundle_grader(spec)
        return f"bundle:{bundle.reference}#{spec.partition('#')[2].strip()}"
    raise Invalid(f"grader {given!r} is not one of {', '.join(GRADER_FORMS)}", hint=GRADER_EXAMPLES)


def builtin_member(spec: str) -> tuple[str, dict[str, Any]] | None:
    """A built-in member grader (`exact`, `contains`, `regex:PATTERN`, `numeric[:TOLERANCE]`) as it is kept and the
    member spec it builds; None for any other grader. A bad pattern or tolerance, or `length`, is refused."""
    kind, colon, rest = spec.partition(":")
    if kind in ("exact", "contains") and not colon:
        return kind, {"kind": kind}
    if kind == "regex" and colon:
        member = {"kind": "regex", "pattern": rest}
    elif kind == "numeric":
        try:
            tolerance = float(rest) if colon else 0.0
        except ValueError:
            tolerance = -1.0
        if not math.isfinite(tolerance) or tolerance < 0:
            raise Invalid(f"grader {spec!r}: the tolerance must be a number of 0 or more",
                          hint="e.g. --grader numeric:0.01 (an absolute tolerance; numeric alone means 0)")
        member = {"kind": "numeric", "tolerance": tolerance}
        rest = f"{tolerance:g}"
    elif kind == "length":
        raise Invalid("grader 'length' is a penalty from -1 to 0, not a score from 0 to 1: it is a reward term only",
                      hint="grade with exact, contains, regex:PATTERN, numeric[:TOLERANCE] or json-label-match")
    else:
        return None
    try:
        check_member(member, where="grader")
    except Invalid as error:
        raise Invalid(f"grader {spec!r}: {error.message}", hint=error.hint) from None
    return f"{kind}:{rest}" if colon or kind == "numeric" else kind, member


def member_grade(grader: str, score: Any) -> Grade:
    """A built-in member's `Score` as a grade: 1.0 or 0.0 (or a share) with what it compared; None leaves the example
    unscored, saying why."""
    if score.value is None:
        why = score.error or f"the row holds no reference for {grader} to compare with"
        return Grade(None, f"unscored: {why}")
    verdict = "matches" if score.value == 1.0 else "does not match" if score.value == 0.0 else f"{score.value:g}"
    return Grade(float(score.value), f"{grader}: {verdict}")


@dataclass(frozen=True)
class BundleGrader:
    """A `bundle:` grader's parts: the bundle's reference (as given, or once resolved `NS/NAME:vN`), the module and
    function called, and the archive's sha256 once resolved (what the worker downloads)."""

    reference: str
    module: str
    function: str = DEFAULT_FUNCTION
    sha256: str | None = None

    @property
    def target(self) -> str:
        return f"{self.module}:{self.function}"

    @property
    def text(self) -> str:
        """As an evaluation keeps it: `bundle:NS/NAME:vN#MODULE:FUNCTION` once resolved."""
        return f"bundle:{self.reference}#{self.target}"

    def resolved(self, reference: str, sha256: str) -> BundleGrader:
        return replace(self, reference=reference, sha256=sha256)

    @property
    def pinned(self) -> str:
        """As the worker's spec names it, with the archive's digest: `bundle:NS/NAME:vN@sha256:HEX#MODULE:FUNCTION`."""
        return f"bundle:{self.reference}@sha256:{self.sha256}#{self.target}"


def parse_bundle_grader(spec: str) -> BundleGrader:
    """`bundle:REF#MODULE[:FUNCTION]` (FUNCTION by default `compute_score`; MODULE has no default, as a bundle
    names no module of its own) as its parts; a malformed one is refused (Invalid) naming the grader and showing the
    form. The worker's pinned form (`REF@sha256:HEX` after a version) is read too."""
    given = spec.strip()
    reference, hashed, target = given.removeprefix("bundle:").strip().partition("#")
    reference, target = reference.strip(), target.strip()
    example = f"bundle:{reference if _is_reference(reference) else 'NS/NAME'}#reward"
    hint = f"write {BUNDLE_FORM}, e.g. --grader {example} (FUNCTION defaults to {DEFAULT_FUNCTION})"
    if not reference:
        raise Invalid(f"grader {given!r} names no scoring bundle", hint=hint)
    sha256 = None
    before, at, digest = reference.partition("@")
    if at and ":" in before and digest.lower().startswith("sha256:"):  # the worker's pinned form
        reference, sha256 = before, digest.lower().removeprefix("sha256:")
    try:
        reference = str(parse_reference(reference))
    except Invalid as error:
        raise Invalid(f"grader {given!r}: {error.message}", hint=hint) from None
    if not hashed or not target:
        raise Invalid(f"grader {given!r} names no module of the bundle: write {BUNDLE_FORM}",
                      hint=f"e.g. --grader {example} for reward.py's {DEFAULT_FUNCTION}, or "
                           f"--grader {example}:my_score")
    if target.endswith(":"):
        raise Invalid(f"grader {given!r} names no function after the colon", hint=hint)
    try:
        module, function = parse_function(target)
    except ValueError as error:
        raise Invalid(f"grader {given!r}: {error}", hint=hint) from None
    return BundleGrader(reference, module, function, sha256)


def _is_reference(text: str) -> bool:
    try:
        parse_reference(text)
    except Invalid:
        return False
    return True


def bundle_grade(grader: BundleGrader, score: Any) -> Grade:
    """A bundle function's `Score` as a grade: a number from 0 to 1 is the score; None (the function does not
    apply), a number outside 0..1, or an error (an exception, a limit) leaves the example unscored, saying why."""
    if score.value is None:
        why = score.error or f"{grader.target} returned None (it does not apply to this example)"
        return Grade(None, f"unscored: {why}")
    if not 0 <= score.value <= 1:
        return Grade(None, f"unscored: {grader.target} returned {score.value:g}, not a score from 0 to 1")
    return Grade(float(score.value), "")


def _host(url: str) -> str | None:
    try:
        return urlsplit(url).hostname
    except ValueError:  # e.g. an unclosed [IPv6 address
        return None


@dataclass
class Grade:
    score: float | None
    explanation: str
    fields: dict[str, bool] = field(default_factory=dict)  # expected field path -> matched


def json_label_match(answer: str, expected: str) -> Grade:
    """The `json-label-match` grade (the scoring member `jsonFieldMatch`, `optimize.scoring.json_field_match`)."""
    match = json_field_match(answer, expected)
    return Grade(match.score, match.explanation, match.fields)


def http_grade(url: str, prompt: str, answer: str, expected: str, client: Any) -> Grade:
    """`client` is an httpx.Client; whatever goes wrong leaves the example unscored, with the reason."""
    try:
        with client.stream("POST", url, json={"input": prompt, "output": answer, "expected": expected}) as response:
            status, content = response.status_code, _read_at_most(response, EVALUATOR_ANSWER_BYTES)
        body = json.loads(content) if status == 200 and content is not None else None
    except Exception as error:  # noqa: BLE001 - any failure of the user's evaluator leaves the example unscored
        return Grade(None, f"the evaluator at {url} could not be reached: {type(error).__name__}")
    if content is None:
        return Grade(None, f"the evaluator at {url} answered more than {EVALUATOR_ANSWER_BYTES:,} bytes")
    if not isinstance(body, dict):
        return Grade(None, f"the evaluator at {url} answered {status} without a JSON object")
    score = body.get("score")
    if isinstance(score, bool) or score is None:
        score = next((body[k] for k in ("score", "ok", "passed") if isinstance(body.get(k), bool)), None)
        score = None if score is None else float(score)
    if not isinstance(score, (int, float)) or not 0 <= score <= 1:
        return Grade(None, f"the evaluator at {url} gave no score between 0 and 1")
    return Grade(float(score), str(body.get("explanation") or ""))


def _read_at_most(response: Any, limit: int) -> bytes | None:
    """The response's body, or None once it passes `limit` bytes (read no further)."""
    content = bytearray()
    for chunk in response.iter_bytes():
        content += chunk
        if len(content) > limit:
            return None
    return bytes(content)


def judge_grade(judge: str, reply: str) -> Grade:
    """The judge's reply read as a grade (`optimize.scoring.judge.judge_grade`): `{"score": S}` with S from 0 to 1
    (or a boolean), else unscored, quoting the reply."""
    score, explanation = read_judge_reply(judge, reply)
    return Grade(score, explanation)


# What a batch grader is handed of each example: `prompt` (the text the model was asked), `expected` (the expected
# answer's content, as `json-label-match` and `http:` read it), `messages` (the prompt's messages), `expectedText`
# (the expected answer's text, as the built-in members and a bundle read it) and `fields` (the row's other fields).
Batch = Callable[[list[dict[str, Any]], list[str]], list[Grade]]


def batch_grader(grader: str, fetch_blob: Callable[[str], Path], held: ExitStack) -> Batch | None:
    """A function grading a batch of answers by `grader` (as a worker's spec names it; a `bundle:` grader pinned to
    its archive's digest, which `fetch_blob` downloads through the job's lease), in the worker that asks for it; what
    it holds (a bundle's process, an HTTP client) is closed by `held`. None for a `model:` judge, which its caller
    serves itself."""
    if grader == DEFAULT_GRADER:
        return lambda batch, answers: [json_label_match(a, item["expected"])
                                       for item, a in zip(batch, answers, strict=True)]
    builtin = builtin_member(grader)
    if builtin is not None:  # exact, contains, regex:PATTERN, numeric[:TOLERANCE]: a reward term's own member
        from optimize.scoring.members import build_builtin
        from optimize.scoring.samples import Sample

        member = build_builtin(builtin[1])
        return lambda batch, answers: [member_grade(grader, score) for score in member.score([
            Sample(prompt=item["messages"], completion=answer, expected=item["expectedText"], fields=item["fields"])
            for item, answer in zip(batch, answers, strict=True)])]
    if grader.startswith("bundle:"):
        return _bundle_batch(grader, fetch_blob, held)
    if grader.startswith("http:"):
        import httpx  # only a worker grading over HTTP needs it

        http = held.enter_context(httpx.Client(timeout=30.0))
        url = grader.removeprefix("http:")
        return lambda batch, answers: [http_grade(url, item["prompt"], a, item["expected"], http)
                                       for item, a in zip(batch, answers, strict=True)]
    return None


def _bundle_batch(grader: str, fetch_blob: Callable[[str], Path], held: ExitStack) -> Batch:
    """`bundle:NS/NAME:vN@sha256:HEX#MODULE:FUNCTION`: the archive downloaded (verified) through the job's lease,
    its function called on each answer in a limited child process, started on the first batch. A process that
    cannot start leaves the batch unscored with the reason (the runner says it), as does any sample's error."""
    from optimize.scoring.bundle_runner import BundleRunner
    from optimize.scoring.samples import Sample

    bundle = parse_bundle_grader(grader)
    runner = held.enter_context(closing(BundleRunner(fetch_blob(bundle.sha256), bundle.target,
                                                     label=bundle.reference)))

    def run_bundle(batch, answers):
        samples = [Sample(prompt=item["messages"], completion=answer, expected=item["expectedText"],
                          fields=item["fields"]) for item, answer in zip(batch, answers, strict=True)]
        return [bundle_grade(bundle, score) for score in runner.score(samples)]

    return run_bundle
