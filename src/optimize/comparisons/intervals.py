"""How a comparison ranks its models: each model's mean score over the rows its grader scored, with a 95% interval
by bootstrap over rows, and the winner's margin over the runner-up with a paired interval (the same resampled rows
for both, over the rows both scored), so a margin that two noisy means happen to show is seen as such.

Resampling is seeded, so scoring the same answers again (a server step taken up after a restart) gives the same
figures. Pure: the scores in, the ranking out."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RESAMPLES = 1000
LEVEL = 0.95
SEED = 0
CHUNK = 100  # resamples drawn at once: a chunk's index matrix is CHUNK × rows


@dataclass(frozen=True)
class Scored:
    model: str
    mean: float
    low: float
    high: float
    rows: int


@dataclass(frozen=True)
class Margin:
    winner: str
    runner_up: str
    margin: float
    low: float
    high: float


def interval(values: np.ndarray, seed: int = SEED) -> tuple[float, float]:
    """The bootstrap interval of the mean of `values` (one row each): the mean of each resample of as many rows,
    drawn with replacement, and the quantiles of those means."""
    if len(values) < 2:
        mean = float(values.mean()) if len(values) else 0.0
        return mean, mean
    rng = np.random.default_rng(seed)
    means = []
    for start in range(0, RESAMPLES, CHUNK):
        picks = rng.integers(0, len(values), size=(min(CHUNK, RESAMPLES - start), len(values)))
        means.append(values[picks].mean(axis=1))
    tail = (1 - LEVEL) / 2
    low, high = np.quantile(np.concatenate(means), [tail, 1 - tail])
    return float(low), float(high)


def scored(model: str, scores: dict[int, float | None]) -> Scored | None:
    """A model's mean and interval over the rows its grader scored (None when it scored none)."""
    values = np.array([s for s in scores.values() if s is not None], dtype=float)
    if not len(values):
        return None
    low, high = interval(values)
    return Scored(model, float(values.mean()), low, high, len(values))


def ranked(models: list[Scored]) -> list[Scored]:
    """Highest mean first; equal means keep the order given (the source first)."""
    return sorted(models, key=lambda m: -m.mean)


def winner_margin(ranking: list[Scored], scores: dict[str, dict[int, float | None]]) -> Margin | None:
    """The first model's margin over the second with its paired interval; None with fewer than two models or when
    the top two tie (a tie names no winner)."""
    if len(ranking) < 2 or ranking[0].mean == ranking[1].mean:
        return None
    first, second = ranking[0], ranking[1]
    both = sorted(line for line, s in scores[first.model].items()
                  if s is not None and scores[second.model].get(line) is not None)
    differences = np.array([scores[first.model][line] - scores[second.model][line] for line in both], dtype=float)
    low, high = interval(differences)
    return Margin(first.model, second.model, first.mean - second.mean, low, high)
