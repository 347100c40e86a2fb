"""Two supervised runs' training losses compared window by window (`akka training runs compare RUN BASELINE`).

Pure: it reads what the runs logged (their train metric points: `loss`, `gradNorm`, `tokens`) and what their plans
resolved to, and answers `schemas.runs.LossComparison`; `training.server.runs.compare_runs` reads them from the store.

- Windows: by update (`step`), window k holds updates (k-1)·W+1 … k·W; by tokens seen (`tokens`), window k holds the
  updates whose tokens seen fall after BASELINE's at its update (k-1)·W and up to its update k·W. Only the span both
  runs reached is compared (up to the smaller of their newest steps, or tokens seen), so a running run is compared
  on what it has logged so far; a window without an update of both runs is left out.
- Each window: both runs' mean loss and the difference RUN − BASELINE. The first window whose difference is beyond
  the margin, in either direction; the verdict from the mean difference (weighted by RUN's updates per window):
  better below −margin, worse above +margin, else same.
- Gradient spikes: an update whose logged (pre-clip) gradient norm is at least spike factor × that run's median.
- Refusals: a run of another method than sft (naming it); runs of plans that differ in more than hyperparams and
  execution, unless across plans (naming what differs); a run with no logged loss yet; align by tokens where a run
  logged no token count.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Literal

from optimize.core.errors import Refused
from optimize.schemas import runs as answers
from optimize.training.methods import declared

Align = Literal["step", "tokens"]
DEFAULT_WINDOW = 10
DEFAULT_SPIKE_FACTOR = 3.0
DEFAULT_MARGIN = 0.05
GRAD_NORM_NAMES = ("gradNorm", "grad_norm")
TOKEN_NAMES = ("tokens", "numTokens", "num_tokens")
# what may differ between two runs of one plan: how they train (hyperparams) and how they execute
FREE = ("config.hyperparams", "config.rlHyperparams", "execution")


@dataclass(frozen=True)
class Side:
    """One run as the comparison reads it: its train metric points ({"step": N, "loss": …, …}) and its plan's facts
    (`plan_facts`)."""

    run_id: str
    method: str
    phase: str
    project: str
    points: list[dict[str, Any]]
    plan: dict[str, tuple[str, Any]] = field(default_factory=dict)


def plan_facts(base_model: str, base_commit: str, dataset: tuple[str, str], validation: tuple[str, str] | None,
               resolved: dict[str, Any]) -> dict[str, tuple[str, Any]]:
    """What makes a run's plan the one it is, by path: (as shown, as compared). The base model by id and commit;
    the training and validation datasets by content digest (shown by reference: two projects' copies of the same
    rows are one dataset); every other resolved config leaf by value. Hyperparams and execution are left out."""
    facts: dict[str, tuple[str, Any]] = {"baseModel": (f"{base_model}@{base_commit[:12]}", (base_model, base_commit)),
                                         "config.dataset": (dataset[0], dataset[1])}
    if validation is not None:
        facts["config.validation.dataset"] = (validation[0], validation[1])
    config = {k: v for k, v in (resolved or {}).get("config", {}).items() if k != "dataset"}
    validation_settings = {k: v for k, v in (config.pop("validation", None) or {}).items() if k != "dataset"}
    if validation_settings:
        config["validation"] = validation_settings
    for path, value in _leaves("config", config):
        if not any(path == free or path.startswith(free + ".") for free in FREE):
            facts[path] = (_shown(value), value)
    return facts


def _leaves(prefix: str, value: Any):
    if isinstance(value, dict) and value:
        for key in sorted(value):
            yield from _leaves(f"{prefix}.{key}", value[key])
    else:
        yield prefix, value


def _shown(value: Any) -> str:
    return "unset" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def plan_differences(run: Side, baseline: Side) -> list[str]:
    """Each fact the two plans do not share: `config.dataset (a/chat:v1 vs b/chat:v2)`."""
    differences = []
    for path in sorted(set(run.plan) | set(baseline.plan), key=_fact_order):
        ours, theirs = run.plan.get(path), baseline.plan.get(path)
        if (ours and ours[1]) != (theirs and theirs[1]):
            differences.append(f"{path} ({ours[0] if ours else 'unset'} vs {theirs[0] if theirs else 'unset'})")
    return differences


def _fact_order(path: str) -> tuple[int, str]:
    return (0 if path == "baseModel" else 1 if path == "config.dataset" else 2, path)


def _losses(side: Side) -> list[dict[str, Any]]:
    return sorted((p for p in side.points if isinstance(p.get("loss"), int | float)), key=lambda p: p["step"])


def _value(point: dict[str, Any], names: tuple[str, ...]) -> float | None:
    for name in names:
        value = point.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


def _refuse_method(side: Side, role: str) -> None:
    if not declared(side.method).loss_compared:
        article = "an" if side.method[:1] in tuple("aefhilmnorsx") else "a"
        raise Refused(f"{role} {side.run_id[:12]} is {article} {side.method} run; a loss comparison reads two "
                      "sft runs' training loss",
                      hint=f"read its metrics with: akka training runs metrics {side.run_id[:12]}")


def compare(run: Side, baseline: Side, window: int = DEFAULT_WINDOW, spike_factor: float = DEFAULT_SPIKE_FACTOR,
            margin: float = DEFAULT_MARGIN, across_plans: bool = False, align: Align = "step"
            ) -> answers.LossComparison:
    """RUN against BASELINE, window by window (the module's docstring says how)."""
    _refuse_method(run, "run")
    _refuse_method(baseline, "baseline")
    differences = plan_differences(run, baseline)
    if differences and not across_plans:
        raise Refused(f"run {run.run_id[:12]} and baseline {baseline.run_id[:12]} are runs of different plans "
                      f"(beyond hyperparams and execution): {'; '.join(differences)}",
                      hint="compare them anyway with --across-plans (acrossPlans=true)")
    ours, theirs = _losses(run), _losses(baseline)
    for side, points in ((run, ours), (baseline, theirs)):
        if not points:
            raise Refused(f"run {side.run_id[:12]} has logged no training loss yet ({side.phase})",
                          hint="compare it once it has trained some updates: akka training runs wait "
                               f"{side.run_id[:12]}")
    if align == "tokens":
        for side, points in ((run, ours), (baseline, theirs)):
            missing = [p["step"] for p in points if _value(p, TOKEN_NAMES) is None]
            if missing:
                raise Refused(f"run {side.run_id[:12]} logged no token count (tokens) with its loss at "
                              f"{len(missing)} of its {len(points)} updates (the first at step {missing[0]}); "
                              "windows cannot be aligned by tokens seen", hint="align them by update: --align step")
        windows = _token_windows(ours, theirs, window)
    else:
        windows = _step_windows(ours, theirs, window)
    weight = sum(w.updates for w in windows)
    mean = sum(w.difference * w.updates for w in windows) / weight if weight else 0.0
    beyond = next((w for w in windows if abs(w.difference) > margin), None)
    return answers.LossComparison(
        run=_summary(run, ours, align), baseline=_summary(baseline, theirs, align), align=align, window=window,
        spike_factor=spike_factor, margin=margin, across_plans=bool(differences), plan_differences=differences,
        windows=windows, windows_compared=len(windows), mean_difference=mean,
        first_beyond_margin=answers.BeyondMargin(
            window=beyond.window, run_steps=beyond.run_steps, difference=beyond.difference,
            direction="better" if beyond.difference < 0 else "worse") if beyond else None,
        spikes=spikes(run, ours, "run", spike_factor) + spikes(baseline, theirs, "baseline", spike_factor),
        verdict="better" if mean < -margin else "worse" if mean > margin else "same",
    )


def _summary(side: Side, points: list[dict[str, Any]], align: Align) -> answers.ComparedRun:
    norms = [n for n in (_value(p, GRAD_NORM_NAMES) for p in points) if n is not None]
    tokens = {"tokens": int(_value(points[-1], TOKEN_NAMES))} if align == "tokens" else {}
    return answers.ComparedRun(run_id=side.run_id, phase=side.phase, project=side.project, updates=len(points),
                               last_step=points[-1]["step"], **tokens,
                               median_grad_norm=statistics.median(norms) if norms else None)


def spikes(side: Side, points: list[dict[str, Any]], role: Literal["run", "baseline"], factor: float
           ) -> list[answers.GradientSpike]:
    """The run's updates whose gradient norm is at least `factor` × its median gradient norm."""
    norms = [(p["step"], n) for p in points if (n := _value(p, GRAD_NORM_NAMES)) is not None]
    if not norms:
        return []
    median = statistics.median(n for _, n in norms)
    if median <= 0:
        return []
    return [answers.GradientSpike(run=role, run_id=side.run_id, step=step, grad_norm=norm, median=median,
                                  ratio=norm / median) for step, norm in norms if norm >= factor * median]


def _window(number: int, ours: list[dict], theirs: list[dict], tokens: list[int] | None = None
            ) -> answers.LossWindow:
    run_loss = statistics.fmean(p["loss"] for p in ours)
    baseline_loss = statistics.fmean(p["loss"] for p in theirs)
    return answers.LossWindow(
        window=number, run_steps=[ours[0]["step"], ours[-1]["step"]],
        baseline_steps=[theirs[0]["step"], theirs[-1]["step"]], **({"tokens": tokens} if tokens else {}),
        run_loss=run_loss, baseline_loss=baseline_loss, difference=run_loss - baseline_loss, updates=len(ours))


def _step_windows(ours: list[dict], theirs: list[dict], size: int) -> list[answers.LossWindow]:
    reached = min(ours[-1]["step"], theirs[-1]["step"])
    grouped: dict[int, tuple[list, list]] = {}
    for index, points in ((0, ours), (1, theirs)):
        for point in points:
            if point["step"] <= reached:
                grouped.setdefault(max(point["step"] - 1, 0) // size + 1, ([], []))[index].append(point)
    return [_window(number, *pair) for number, pair in sorted(grouped.items()) if pair[0] and pair[1]]


def _token_windows(ours: list[dict], theirs: list[dict], size: int) -> list[answers.LossWindow]:
    """Windows by tokens seen: BASELINE's every `size`-th update sets a bound; the last bound is the fewest tokens
    both runs reached."""
    reached = min(_value(ours[-1], TOKEN_NAMES), _value(theirs[-1], TOKEN_NAMES))
    bounds = [_value(p, TOKEN_NAMES) for p in theirs[size - 1::size]]
    bounds = [0.0] + [b for b in bounds if b < reached] + [reached]
    found = []
    for number, (low, high) in enumerate(zip(bounds, bounds[1:], strict=False), start=1):
        inside = [[p for p in points if low < _value(p, TOKEN_NAMES) <= high] for points in (ours, theirs)]
        if inside[0] and inside[1]:
            found.append(_window(number, *inside, tokens=[int(low), int(high)]))
    return found
