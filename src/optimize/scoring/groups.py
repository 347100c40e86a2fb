"""Prompt groups: the answers sampled for one prompt, scored. A group whose scored answers all score the same gives
a GRPO/GSPO update nothing to learn from (every advantage is zero), so the share of such groups is what a reward
check, a sampling evaluation and a dry run report, and warn about past `MOSTLY_CONSTANT`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

MOSTLY_CONSTANT = 0.5  # above this share of constant groups, most of a run's rollouts teach it nothing


def zero_variance_share(groups: Iterable[Sequence[float | None]]) -> tuple[float | None, int]:
    """(share of groups whose scored answers all score the same, groups counted): a group counts when at least two
    of its answers were scored; None when none counts."""
    varied = [len(set(scored)) > 1 for scored in ([v for v in group if v is not None] for group in groups)
              if len(scored) > 1]
    return (varied.count(False) / len(varied) if varied else None), len(varied)
