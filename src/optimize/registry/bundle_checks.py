"""Checking a scoring bundle against a dataset version before a run or an evaluation relies on it
(`akka registry bundles check`, `POST /v1/registry/bundles/{ns}/{name}/check`).

The check runs on the server, synchronously and within a bound:

1. the bundle version and the dataset version are resolved (a chat dataset: a preference dataset is refused naming
   its kind);
2. the function is imported in the bundle's limited child process (`BundleRunner.check()`): a module that does not
   import, or names no such function, refuses the check (Invalid naming the module and the import's error);
3. the row fields the module declares it reads — a module-level literal `FIELDS = ["answer", ...]`, read from the
   archive's source text without running it — must be present (not absent, not null) in every row of the dataset
   version; the check is refused naming the first lines that lack each field (`expected` is present when the row
   ends with an assistant answer, as the function receives it);
4. the first N rows (`samples`) are scored, each with its own final assistant answer as the completion (a row
   without one has no answer to score without a model), and the report gives the count scored, unscored (None),
   errors with their first lines, and the mean, standard deviation, min and max of the values.

What a GRPO run needs most — the share of prompt groups whose rewards do not vary — needs several sampled answers
per prompt, i.e. a model and a device: with `model`, the route also starts a sampling evaluation of that model on
the same rows with this function as its grader (`optimize.evaluation.service`, a job on the kernel), whose report
holds the sampled answers' mean, spread, unscored count and `zeroVarianceShare`; the check's answer names it
(`sampling.evaluationId`) and `akka registry bundles check --model` follows it to its end.

Bounds: at most `MAX_SAMPLES` rows scored, each within its time limit (`timeLimitSeconds`, at most
`MAX_TIME_LIMIT_S`); scoring stops after `SCORING_BUDGET_S` seconds or after `GIVE_UP_AFTER` rows in a row lost the
scoring process (the rest are `notReached`); the field scan stops after `FIELDS_BUDGET_S` seconds (the report says
how many rows it read).
"""

from __future__ import annotations

import ast
import math
import statistics
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optimize.core.errors import Gone, Invalid, Refused
from optimize.core.refs import parse_reference
from optimize.registry import bundles, datasets
from optimize.registry.rows import version_rows
from optimize.registry.uploads import Registry
from optimize.schemas.bundles import BundleCheck
from optimize.scoring import BundleRunner, Sample, Score, parse_function, sample_from_row
from optimize.scoring.bundle_runner import DEFAULT_TIME_LIMIT_S

DEFAULT_SAMPLES = 64
MAX_SAMPLES = 1000
MAX_TIME_LIMIT_S = 60.0  # per row scored
SCORING_BUDGET_S = 120.0  # all rows scored together
FIELDS_BUDGET_S = 60.0  # reading every row for the declared fields
GIVE_UP_AFTER = 8  # rows in a row that lost the scoring process (a timeout, a crash)
SHOWN_ERRORS = 3
SHOWN_LINES = 10  # lines named per field lacking it
DEFAULT_MODULE = "reward"
FIELDS_NAME = "FIELDS"
MAX_SOURCE_BYTES = 8 * 1024 * 1024

ZERO_VARIANCE_NOTE = ("zeroVarianceShare needs several answers per prompt: check with --model M to sample M's answers "
                      "(each row's own final assistant answer was scored once)")


def default_function(modules: list[str]) -> str:
    """The function checked when none is named: `reward:compute_score` (the layout the docs show), or in a bundle of
    one module, that module's `compute_score`."""
    if f"{DEFAULT_MODULE}.py" in modules:
        return DEFAULT_MODULE
    top = [m for m in modules if "/" not in m and m != "__init__.py"]
    if len(top) == 1:
        return top[0].removesuffix(".py")
    shown = ", ".join(modules[:10]) + (", ..." if len(modules) > 10 else "")
    raise Invalid(f"the bundle holds no {DEFAULT_MODULE}.py, the module checked by default, and more than one module",
                  hint=f"name the module to check with --function MODULE[:FUNCTION]; its modules: {shown}")


# --- the fields a module declares ----------------------------------------------------------------------------------


def module_member(module: str, members: list[str]) -> str | None:
    """The archive member holding a dotted module: `pkg/reward.py`, or `pkg/reward/__init__.py`."""
    path = module.replace(".", "/")
    for candidate in (f"{path}.py", f"{path}/__init__.py"):
        if candidate in members:
            return candidate
    return None


def declared_fields(archive: Path, member: str) -> list[str] | None:
    """The row fields a module declares it reads: its top-level `FIELDS = [...]` (a literal list or tuple of
    names), read from its source without running it; None when it declares none."""
    with zipfile.ZipFile(archive) as bundle:
        info = bundle.getinfo(member)
        if info.file_size > MAX_SOURCE_BYTES:
            raise Invalid(f"{member} holds {info.file_size:,} bytes of source; its FIELDS are read from at most "
                          f"{MAX_SOURCE_BYTES:,}", hint="move data out of the module into a data file beside it")
        source = bundle.read(member)
    try:
        tree = ast.parse(source, filename=member)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as error:
        raise Invalid(f"{member} cannot be read for its FIELDS: {type(error).__name__}: {error}",
                      hint="fix the module's source") from None
    found: ast.expr | None = None
    line = 0
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == FIELDS_NAME
                                                for t in node.targets):
            found, line = node.value, node.lineno
        elif (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
              and node.target.id == FIELDS_NAME and node.value is not None):
            found, line = node.value, node.lineno
    if found is None:
        return None
    hint = ('write the row fields the function reads as a literal list of names, e.g. FIELDS = ["answer"] (it is '
            "read without running the module)")
    try:
        value = ast.literal_eval(found)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        raise Invalid(f"{member} line {line}: {FIELDS_NAME} is not a literal list of field names", hint=hint,
                      member=member) from None
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v.strip() for v in value):
        raise Invalid(f"{member} line {line}: {FIELDS_NAME} must list field names (strings), got {value!r}"[:300],
                      hint=hint, member=member)
    return list(dict.fromkeys(value))


def _value_for(row: dict[str, Any], name: str) -> Any:
    """What the function receives as `fields[name]`: the row's top-level field; `expected`, when the row has no such
    field, is the row's final assistant answer (None when it ends with tool calls only)."""
    if name == "messages":
        return row.get("messages")
    if name == "expected" and "expected" not in row:
        return sample_from_row(row, "").expected
    return row.get(name)


@dataclass
class _Lacking:
    name: str
    count: int = 0
    lines: list[int] = field(default_factory=list)

    def add(self, line: int) -> None:
        self.count += 1
        if len(self.lines) < SHOWN_LINES:
            self.lines.append(line)

    def sentence(self) -> str:
        more = self.count - 1
        if more:
            return f"line {self.lines[0]} and {more} more lack field {self.name!r}"
        return f"line {self.lines[0]} lacks field {self.name!r}"


def check_fields(registry: Registry, objects: list[dict[str, Any]], label: str, names: list[str], total: int,
                 member: str, budget_s: float = FIELDS_BUDGET_S) -> int:
    """Every row must hold every declared field (present, not null); returns the rows read (fewer than `total`
    when the budget ran out). Refused (Invalid) naming the first lines lacking each field."""
    lacking = {name: _Lacking(name) for name in names}
    deadline = time.monotonic() + budget_s
    read = 0
    for line, row in version_rows(registry.blobs, objects, label):
        for name in names:
            if _value_for(row, name) is None:
                lacking[name].add(line)
        read = line
        if time.monotonic() > deadline:
            break
    missing = [item for item in lacking.values() if item.count]
    if missing:
        partial = "" if read >= total else f" (in the first {read:,} of its {total:,} rows)"
        errors = sorted(({"line": line, "reason": f"lacks field {item.name!r}"}
                         for item in missing for line in item.lines), key=lambda e: e["line"])[:SHOWN_LINES]
        declared = f"field{'s' if len(names) > 1 else ''} {', '.join(repr(n) for n in names)}"
        raise Invalid(f"{member} declares the row {declared}, which rows of {label} lack{partial}: "
                      + "; ".join(item.sentence() for item in missing),
                      hint="give every row the field (absent and null both lack it) and register the dataset again, "
                           f"or leave the field out of {FIELDS_NAME} if the function does without it",
                      errors=errors,
                      missing=[{"field": i.name, "count": i.count, "lines": i.lines} for i in missing])
    return read


# --- the check -----------------------------------------------------------------------------------------------------


@dataclass
class _Tally:
    rows: int = 0
    without_answer: int = 0
    unscored: int = 0
    not_reached: int = 0
    values: list[float] = field(default_factory=list)
    error_count: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)

    def add(self, line: int, score: Score) -> None:
        if score.error is not None:
            self.error_count += 1
            if len(self.errors) < SHOWN_ERRORS:
                self.errors.append({"line": line, "error": score.error})
        elif score.value is None:
            self.unscored += 1
        else:
            self.values.append(score.value)


def _check_request(samples: Any, time_limit_s: Any, function: Any) -> None:
    if isinstance(samples, bool) or not isinstance(samples, int) or not 1 <= samples <= MAX_SAMPLES:
        raise Invalid(f"samples: expected a whole number of rows from 1 to {MAX_SAMPLES}, got {samples!r}")
    if (isinstance(time_limit_s, bool) or not isinstance(time_limit_s, (int, float))
            or not 0 < time_limit_s <= MAX_TIME_LIMIT_S):
        raise Invalid(f"timeLimitSeconds: expected seconds per row, more than 0 and at most {MAX_TIME_LIMIT_S:g}, "
                      f"got {time_limit_s!r}")
    if function is not None:
        try:
            parse_function(function)
        except ValueError as error:
            raise Invalid(f"function: {error}") from None


def check_bundle(registry: Registry, namespace: str, name: str, *, dataset: str, selector: str | None = None,
                 function: str | None = None, samples: int = DEFAULT_SAMPLES, model: str | None = None,
                 time_limit_s: float = DEFAULT_TIME_LIMIT_S, scoring_budget_s: float = SCORING_BUDGET_S
                 ) -> BundleCheck:
    """The check's report (see the module's docstring); refusals raise PlatformError, never a bundle's own error."""
    _check_request(samples, time_limit_s, function)
    with registry.store.transaction() as session:
        bundle = bundles.get_bundle(session, namespace, name)
        version = bundles.resolve_version(session, bundle, selector or "latest")
        artifact = f"{bundle.namespace}/{bundle.name}"
        bundle_label = f"{artifact}:v{version.version}"
        members = [item["path"] for item in version.members]
        sha256 = version.sha256
        found, dataset_version = datasets.resolve_reference(session, parse_reference(dataset))
        dataset_label = f"{found.namespace}/{found.name}:v{dataset_version.version}"
        if found.kind != "chat":
            holds = {"preference": "preference pairs"}.get(found.kind, f"{found.kind} rows")
            raise Refused(f"dataset {dataset_label} holds {holds}; a bundle check scores chat rows (each row's final "
                          "assistant answer, as a reward term or a grader sees it)", hint="check on a chat dataset")
        objects = datasets.examples_objects(session, dataset_version.digest)
        total = dataset_version.rows
    modules = [m for m in members if m.endswith(".py")]
    target = function.strip() if function is not None else default_function(modules)
    module, function_name = parse_function(target)
    target = f"{module}:{function_name}"
    if not registry.blobs.holds(sha256):
        raise Gone(f"the archive of {bundle_label} (sha256:{sha256}) is missing from the blob store",
                   hint=f"register the bundle's files again: akka registry bundles register {artifact} -f DIR_OR_ZIP")
    archive = registry.blobs.verified_path(sha256)
    notes: list[str] = []
    with BundleRunner(archive, target, label=bundle_label, time_limit_s=float(time_limit_s),
                      give_up_after=GIVE_UP_AFTER) as runner:
        member = module_member(module, members)
        names = declared_fields(archive, member) if member is not None else None
        field_rows = None
        if names:
            field_rows = check_fields(registry, objects, dataset_label, names, total, member)
            if field_rows < total:
                notes.append(f"the field check read the first {field_rows:,} of {total:,} rows within its "
                             f"{FIELDS_BUDGET_S:g} s; the rest were not checked")
        elif names is None:
            notes.append(f"{member or module} declares no {FIELDS_NAME}: which row fields the function reads was not "
                         "checked (declare them as FIELDS = [\"answer\", ...])")
        tally = _score(runner, registry, objects, dataset_label, samples, scoring_budget_s, notes)
        isolation = runner.isolation
    if tally.without_answer:
        notes.append(f"{tally.without_answer} of the rows read end without an assistant answer: "
                     + ("the model's sampled answers are scored for them" if model else
                        "without --model there is no answer to score for them"))
    if not model:
        notes.append(ZERO_VARIANCE_NOTE)
    values = tally.values
    return BundleCheck(**{
        "bundle": bundle_label,
        "digest": f"sha256:{sha256}",
        "function": target,
        "dataset": dataset_label,
        "datasetRows": total,
        "fields": names,
        "fieldRowsChecked": field_rows,
        "samples": samples,
        "rows": tally.rows,
        "scored": len(values),
        "unscored": tally.unscored,
        "withoutAnswer": tally.without_answer,
        "notReached": tally.not_reached,
        "errors": {"count": tally.error_count, "first": tally.errors},
        "mean": math.fsum(values) / len(values) if values else None,
        "std": statistics.pstdev(values) if values else None,
        "min": min(values) if values else None,
        "max": max(values) if values else None,
        "zeroVarianceShare": None,
        "isolation": isolation,
        "notes": notes,
        "sampling": None,
    })


def _score(runner: BundleRunner, registry: Registry, objects: list[dict[str, Any]], label: str, samples: int,
           budget_s: float, notes: list[str]) -> _Tally:
    """Score each of the first `samples` rows' own final answer, one at a time, within the budget."""
    tally = _Tally()
    deadline = time.monotonic() + budget_s
    lost_in_a_row, stopped = 0, None
    for line, row in version_rows(registry.blobs, objects, label):
        if line > samples:
            break
        tally.rows += 1
        if stopped is not None:
            tally.not_reached += 1
            continue
        if time.monotonic() > deadline:
            stopped = f"scoring stopped after {budget_s:g} s, the check's bound"
            tally.not_reached += 1
            continue
        expected = sample_from_row(row, "").expected
        if expected is None:
            tally.without_answer += 1
            continue
        sample: Sample = sample_from_row(row, expected)
        score = runner.score([sample])[0]
        tally.add(line, score)
        lost_in_a_row = 0 if runner.running else lost_in_a_row + 1
        if lost_in_a_row >= GIVE_UP_AFTER:
            stopped = (f"scoring stopped: the scoring process was lost on {lost_in_a_row} rows in a row (the last "
                       f"one: {score.error})")
    if stopped is not None and tally.not_reached:
        notes.append(f"{stopped}; {tally.not_reached} of the {tally.rows} rows read were not reached")
    return tally


__all__ = ["DEFAULT_SAMPLES", "MAX_SAMPLES", "MAX_TIME_LIMIT_S", "check_bundle"]
