"""Guards on a reinforcement run's results: the rule that reads its per-update reward and KL, warns when the run
is going wrong and says when `execution.stopWhen` is met. Pure (figures in, findings out); the server applies it
as the worker's metrics arrive (`reports.watch`), so `runs get`, a follower, the dashboard and the run's events
all read the one verdict it recorded.

The rule judges windows of updates, never one update: each update's reward is already a mean over its batch's
completions, but a small batch still swings from one update to the next.

- **Window**: a tenth of the run's updates, at least `LEAST_WINDOW` (3) and at most `MOST_WINDOW` (10) — long
  enough that one unlucky batch does not decide, short enough that a run of a few dozen updates is judged while
  there is still something to save. Too few updates for a window: no verdict.
- **Anchor**: the mean reward (and its spread, TRL's `reward_std`) over the run's first window.
- **Reward drop** (warning `rewardDrop`): the mean reward over the latest window, which must not overlap the
  first, is below the anchor by more than `DROP_SHARE` (a quarter) of the reward's scale — the larger of the
  anchor's size and its spread, so a reward that starts near 0 is judged against how much its completions differ,
  and noise of a few hundredths on a reward around 1 never warns.
- **KL** (warning `klHigh`): the mean KL against the starting policy over the latest window is above `KL_WARN`
  (0.25 per token). With the default klBeta of 0.04 a healthy run keeps it in the hundredths; a quarter means the
  policy now samples tokens its start would not, most often because the reward is being gamed or the learning
  rate is too high. A run without a KL penalty (klBeta 0) measures none and gets no KL verdict.
- **Stop** (`execution.stopWhen`): `rewardDropBelow: X` is met when the mean reward over the latest window is
  below X (an absolute reward, not a share of the start: a run that starts below X stops after its first window);
  `klAbove: Y` when the mean KL over the latest window is above Y. The reward bound is judged first.

A finding is a JSON object: `kind`, `step` (the newest update judged), `window` ([first, last] update of the latest
window), `value` (its mean), `bound` (the figure it crossed), for a reward drop `anchor` (the first window's
mean and updates), and `message`, one sentence.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

LEAST_WINDOW, MOST_WINDOW = 3, 10
WINDOW_SHARE = 0.1  # of the run's updates
DROP_SHARE = 0.25  # of the reward's scale: a drop past this warns
KL_WARN = 0.25  # mean per-token KL over a window past this warns
WARNINGS = ("rewardDrop", "klHigh")
STOPS = ("rewardDropBelow", "klAbove")


@dataclass(frozen=True)
class Update:
    """One update's figures as the worker reported them (None where it reported none)."""

    step: int
    reward: float | None = None
    spread: float | None = None  # the reward's standard deviation over the update's completions
    kl: float | None = None

    @classmethod
    def of(cls, step: int, values: dict[str, Any]) -> Update:
        """From a stored metric row's values (`reward`, `rewardStd`, `kl`)."""
        return cls(step, _finite(values.get("reward")), _finite(values.get("rewardStd")), _finite(values.get("kl")))


def window_for(total_steps: int | None) -> int:
    """The window of a run of `total_steps` updates (the least window when its length is not known yet)."""
    return min(MOST_WINDOW, max(LEAST_WINDOW, int((total_steps or 0) * WINDOW_SHARE)))


def anchor_of(first: Sequence[Update], window: int) -> dict[str, Any] | None:
    """The first window's mean reward and spread, from the run's first updates in order; None until `window`
    updates with a reward are in."""
    rewarded = [u for u in first if u.reward is not None][:window]
    if len(rewarded) < window:
        return None
    spreads = [u.spread for u in rewarded if u.spread is not None]
    return {"window": [rewarded[0].step, rewarded[-1].step], "reward": _mean([u.reward for u in rewarded]),
            "spread": _mean(spreads) if spreads else 0.0}


def judge(anchor: dict[str, Any] | None, recent: Sequence[Update], window: int,
          reward_below: float | None = None, kl_above: float | None = None
          ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """(warnings, the stop met or None) on the run's latest updates in order (`recent`: at least the last `window`;
    updates without the figure a rule reads are passed over)."""
    rewards = [u for u in recent if u.reward is not None][-window:]
    kls = [u for u in recent if u.kl is not None][-window:]
    reward = _mean([u.reward for u in rewards]) if len(rewards) == window else None
    kl = _mean([u.kl for u in kls]) if len(kls) == window else None
    found = []
    if reward is not None and anchor is not None and rewards[0].step > anchor["window"][1]:
        margin = DROP_SHARE * max(abs(anchor["reward"]), anchor["spread"])
        if anchor["reward"] - reward > margin:
            first = anchor["window"]
            found.append(_finding(
                "rewardDrop", rewards, reward, anchor["reward"] - margin,
                f"the mean reward fell to {reward:.3f} over {_span(rewards)}, from {anchor['reward']:.3f} over "
                f"updates {first[0]}–{first[1]}: more than a quarter of the reward's scale ({margin:.3f}); read "
                "the latest rollouts to see what the policy now answers",
                anchor={"window": first, "reward": anchor["reward"]}))
    if kl is not None and kl > KL_WARN:
        found.append(_finding(
            "klHigh", kls, kl, KL_WARN,
            f"the mean KL against the starting policy is {kl:.3f} over {_span(kls)}, above {KL_WARN:g}: the policy "
            "samples far from where it started; a larger klBeta or a smaller learning rate keeps it closer"))
    stop = None
    if reward is not None and reward_below is not None and reward < reward_below:
        stop = _finding("rewardDropBelow", rewards, reward, reward_below,
                        f"the mean reward over {_span(rewards)}, {reward:.3f}, is below "
                        f"execution.stopWhen.rewardDropBelow {reward_below:g}")
    elif kl is not None and kl_above is not None and kl > kl_above:
        stop = _finding("klAbove", kls, kl, kl_above,
                        f"the mean KL over {_span(kls)}, {kl:.3f}, is above execution.stopWhen.klAbove {kl_above:g}")
    return found, stop


def _finding(kind: str, updates: Sequence[Update], value: float, bound: float, message: str,
             **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "step": updates[-1].step, "window": [updates[0].step, updates[-1].step],
            "value": round(value, 6), "bound": round(bound, 6), **extra, "message": message}


def _span(updates: Sequence[Update]) -> str:
    return f"updates {updates[0].step}–{updates[-1].step}"


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None
