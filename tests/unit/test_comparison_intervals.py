"""How a comparison ranks its models: means over the rows scored, bootstrap intervals that hold the mean and narrow
with more rows, a winner's margin with a paired interval, no winner on a tie, the same figures every time."""

from __future__ import annotations

import pytest

from optimize.comparisons import intervals


def lines(*scores):
    return dict(enumerate(scores))


def test_a_mean_and_its_interval_over_the_rows_scored():
    scored = intervals.scored("a/m:v1", lines(1.0, 0.0, 1.0, None, 1.0))
    assert (scored.mean, scored.rows) == (0.75, 4)  # an unscored row is left out, as an evaluation's mean leaves it
    assert 0.0 <= scored.low <= scored.mean <= scored.high <= 1.0
    assert intervals.scored("a/m:v1", lines(None, None)) is None
    assert intervals.scored("a/m:v1", lines(0.5)) == intervals.Scored("a/m:v1", 0.5, 0.5, 0.5, 1)


def test_more_rows_narrow_the_interval_and_the_figures_repeat():
    few = intervals.scored("m", lines(*[1.0, 0.0] * 5))
    many = intervals.scored("m", lines(*[1.0, 0.0] * 500))
    assert (many.high - many.low) < (few.high - few.low) / 5
    assert intervals.scored("m", lines(*[1.0, 0.0] * 5)) == few  # seeded: a step taken again scores the same


def test_the_winner_margin_is_paired_over_the_rows_both_scored():
    scores = {"src": lines(0.5, 0.5, 0.5, 0.5, None), "b1": lines(0.6, 0.7, 0.6, 0.7, 1.0),
              "b2": lines(0.1, 0.2, 0.1, 0.2, 0.1)}
    ranking = intervals.ranked([intervals.scored(m, s) for m, s in scores.items()])
    assert [m.model for m in ranking] == ["b1", "src", "b2"]
    margin = intervals.winner_margin(ranking, scores)
    assert (margin.winner, margin.runner_up) == ("b1", "src")
    assert margin.margin == pytest.approx(ranking[0].mean - 0.5)
    # paired over the four rows both scored: every difference is 0.1 or 0.2, so the interval stays inside them
    assert 0.1 - 1e-9 <= margin.low <= margin.high <= 0.2 + 1e-9


def test_a_tie_at_the_top_names_no_winner_and_one_model_none():
    scores = {"a": lines(1.0, 0.0), "b": lines(0.0, 1.0)}
    ranking = intervals.ranked([intervals.scored(m, s) for m, s in scores.items()])
    assert [m.model for m in ranking] == ["a", "b"]  # equal means keep the order given
    assert intervals.winner_margin(ranking, scores) is None
    assert intervals.winner_margin(ranking[:1], scores) is None
