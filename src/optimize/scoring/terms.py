"""A scoring member from its spec, whatever its kind: a built-in (scored in this process), `rule` (a scoring
bundle's function, scored in a separate limited process) or `judge` (a model asked to grade, through the `ask`
callable the caller builds: this package loads no model). Every member has `.check()`, `.score(samples)` and
`.close()` and is a context manager, so a reward term and an evaluation grader use them alike."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from optimize.core.errors import Invalid
from optimize.scoring.bundle_runner import (
    DEFAULT_GIVE_UP_AFTER,
    DEFAULT_MEMORY_LIMIT_MB,
    DEFAULT_START_TIMEOUT_S,
    DEFAULT_TIME_LIMIT_S,
    BundleRunner,
)
from optimize.scoring.judge import LOCAL_KEYS, RESOLVED_KEYS, Ask, JudgeMember
from optimize.scoring.members import JUDGE_KIND, RULE_KIND, build_builtin, check_member, present
from optimize.scoring.samples import Sample, Score


class Member(Protocol):
    kind: str

    def check(self) -> None:
        """Load what the member needs (a bundle's module and function), raising Invalid naming what fails."""

    def score(self, samples: list[Sample]) -> list[Score]:
        """One Score per sample, in order; a sample's failure is its Score's error, never raised."""

    def close(self) -> None:
        """Release what the member holds (a bundle's process); safe to call twice."""


class RuleMember:
    """A `rule` member: a scoring bundle's function, run by a BundleRunner (started on `check()` or the first
    `score()`)."""

    kind = RULE_KIND

    def __init__(self, spec: Mapping[str, Any], runner: BundleRunner) -> None:
        self.spec = dict(spec)
        self.runner = runner

    def check(self) -> None:
        self.runner.check()

    def score(self, samples: list[Sample]) -> list[Score]:
        return self.runner.score(samples)

    def close(self) -> None:
        self.runner.close()

    def __enter__(self) -> RuleMember:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_term(spec: Mapping[str, Any], where: str = "") -> None:
    """Validate a reward term's or grader's member spec (`check_member`): Invalid whose message starts with the
    field's path, `where` being the term's own (`config.reward.terms[1]`)."""
    check_member(spec, where=where)


def member_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A resolved term's spec as a member reads it: without the keys admission and the worker add (a bundle's
    digest and local path, a judge's frozen reference and local files)."""
    added = {"bundleSha256", "bundlePath", *RESOLVED_KEYS, *LOCAL_KEYS}
    return {key: value for key, value in spec.items() if key not in added}


def build_member(spec: Mapping[str, Any], bundle_source: Path | str | None = None, *, where: str = "",
                 start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
                 give_up_after: int = DEFAULT_GIVE_UP_AFTER, judge: Ask | None = None,
                 judge_label: str | None = None, release: Callable[[], None] | None = None) -> Member:
    """The member a spec describes, checked first (Invalid naming the field's path, prefixed by `where`).

    A `rule` spec names its bundle by reference (`bundle`); the caller resolves that reference and passes the
    bundle's local ZIP or folder as `bundle_source`. Its `timeLimitSeconds` (default 10) and `memoryLimitMb`
    (default 1024) are the process's limits. No process starts until `check()` or the first `score()`.

    A `judge` spec needs `judge`, the callable that answers the judge's conversations with its replies (the caller
    loads the model; `release`, when given, is called by `close()`)."""
    check_member(spec, where=where)
    spec = present(spec)
    if spec["kind"] == JUDGE_KIND:
        if judge is None:
            raise Invalid(f"{where + '.' if where else ''}model: the judge {spec['model']!r} was not loaded here")
        return JudgeMember(spec, judge, judge_label, release)
    if spec["kind"] != RULE_KIND:
        return build_builtin(spec, where=where)
    if bundle_source is None:
        raise Invalid(f"{where + '.' if where else ''}bundle: the scoring bundle {spec['bundle']!r} was not "
                      "resolved to a local file")
    runner = BundleRunner(Path(bundle_source), spec["function"],
                          time_limit_s=float(spec.get("timeLimitSeconds", DEFAULT_TIME_LIMIT_S)),
                          memory_limit_mb=int(spec.get("memoryLimitMb", DEFAULT_MEMORY_LIMIT_MB)),
                          start_timeout_s=start_timeout_s, give_up_after=give_up_after, label=spec["bundle"])
    return RuleMember(spec, runner)
