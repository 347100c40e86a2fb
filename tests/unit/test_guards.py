"""The guards' rule on sequences of updates, fed one update at a time as a run reports them: a run whose reward
falls from 1.02 to 0.33 in 6 updates while its KL rises from 0.01 to 0.37 is warned about both at its sixth update;
a noisy run that holds its reward is never warned about; too few updates give no verdict; `stopWhen`'s bounds are
met on the latest window's mean."""

from __future__ import annotations

import random

import pytest

from optimize.training.server.guards import KL_WARN, Update, anchor_of, judge, window_for

GONE_WRONG_REWARD = [1.02, 0.98, 0.95, 0.71, 0.52, 0.33]
GONE_WRONG_KL = [0.01, 0.08, 0.15, 0.23, 0.30, 0.37]


def updates(rewards, kls=None, spread=0.4) -> list[Update]:
    kls = kls or [None] * len(rewards)
    return [Update(step, reward, spread, kl) for step, (reward, kl) in enumerate(zip(rewards, kls, strict=True), 1)]


def verdicts(run: list[Update], window: int, **stop):
    """Each prefix of the run judged as the server judges it when that update's metrics arrive."""
    out = []
    for end in range(1, len(run) + 1):
        seen = run[:end]
        out.append(judge(anchor_of(seen, window), seen[-2 * window:], window, **stop))
    return out


def test_the_window_is_a_tenth_of_the_run_between_3_and_10_updates():
    assert [window_for(n) for n in (None, 6, 20, 45, 100, 5000)] == [3, 3, 3, 4, 10, 10]


def test_a_run_whose_reward_falls_and_kl_rises_is_warned_at_its_sixth_update():
    judged = verdicts(updates(GONE_WRONG_REWARD, GONE_WRONG_KL), window=3)
    assert all(found == [] for found, _ in judged[:5])  # the KL window 3-5 is at 0.227, under the bound
    found, stop = judged[5]
    assert stop is None
    drop, kl = found
    assert drop["kind"] == "rewardDrop" and drop["window"] == [4, 6] and drop["step"] == 6
    assert drop["value"] == pytest.approx(0.52)
    assert drop["anchor"] == {"window": [1, 3], "reward": pytest.approx(0.983333, abs=1e-6)}
    assert drop["bound"] == pytest.approx(0.983333 * 0.75, abs=1e-5)
    assert drop["message"].startswith("the mean reward fell to 0.520 over updates 4–6, from 0.983 over updates 1–3")
    assert kl["kind"] == "klHigh" and kl["value"] == pytest.approx(0.30) and kl["bound"] == KL_WARN
    assert "the mean KL against the starting policy is 0.300 over updates 4–6, above 0.25" in kl["message"]


def test_a_noisy_run_that_holds_its_reward_is_never_warned_about():
    rng = random.Random(7)
    rewards = [0.5 + 0.004 * step + rng.uniform(-0.15, 0.15) for step in range(60)]
    kls = [min(0.02 + 0.002 * step + rng.uniform(0, 0.05), 0.2) for step in range(60)]
    for window in (3, 6, 10):
        assert all(found == [] and stop is None for found, stop in verdicts(updates(rewards, kls), window))


def test_a_reward_near_zero_is_judged_against_its_spread():
    # starts at 0.02 with completions 0.3 apart: a fall to -0.02 is noise, a fall to -0.2 is not
    start = [0.03, 0.01, 0.02]
    assert judge(anchor_of(updates(start, spread=0.3), 3), updates(start + [-0.02] * 3, spread=0.3), 3) == ([], None)
    found, _ = judge(anchor_of(updates(start, spread=0.3), 3), updates(start + [-0.2] * 3, spread=0.3), 3)
    assert [f["kind"] for f in found] == ["rewardDrop"]


def test_too_few_updates_give_no_verdict():
    run = updates([1.0, 0.0, 0.0, 0.0, 0.0], [5.0] * 5)
    assert anchor_of(run[:2], 3) is None
    assert judge(None, run[:2], 3, reward_below=10, kl_above=0) == ([], None)
    found, _ = judge(anchor_of(run, 3), run, 3)  # the latest window (3-5) overlaps the first (1-3): no drop yet
    assert [f["kind"] for f in found] == ["klHigh"]


def test_updates_without_a_figure_are_passed_over():
    run = [Update(1, 1.0, 0.1), Update(2, None), Update(3, 1.0, 0.1), Update(4, 1.0, 0.1)]
    assert anchor_of(run, 3) == {"window": [1, 4], "reward": 1.0, "spread": pytest.approx(0.1)}
    assert judge(None, run, 3, kl_above=0) == ([], None)  # klBeta 0: no KL reported, no KL verdict
    assert Update.of(5, {"reward": float("nan"), "rewardStd": True, "kl": 0.5}) == Update(5, None, None, 0.5)


def test_stop_bounds_are_met_on_the_latest_windows_mean():
    run = updates([0.9, 0.8, 0.7, 0.6], [0.01, 0.02, 0.03, 0.2])
    _, stop = judge(None, run, 3, reward_below=0.75)
    assert stop["kind"] == "rewardDropBelow" and stop["window"] == [2, 4] and stop["value"] == pytest.approx(0.7)
    assert stop["message"] == ("the mean reward over updates 2–4, 0.700, is below execution.stopWhen.rewardDropBelow "
                               "0.75")
    assert judge(None, run, 3, reward_below=0.7)[1] is None  # not below: at it
    _, stop = judge(None, run, 3, kl_above=0.05)
    assert stop["kind"] == "klAbove" and stop["message"] == ("the mean KL over updates 2–4, 0.083, is above "
                                                             "execution.stopWhen.klAbove 0.05")
    assert judge(None, run, 3, reward_below=0.75, kl_above=0.05)[1]["kind"] == "rewardDropBelow"  # reward first
