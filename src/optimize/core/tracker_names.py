"""The names a run's metrics take in other trackers (TensorBoard, MLflow, W&B): the names TRL's own trainers log them
under, so a chart of an Optimize run sits beside one of a plain TRL run; shared by `akka training runs tensorboard`
(the CLI) and the server's MLflow and W&B forwarders.

A run's metrics are stored under Optimize's names (`learningRate`, `reward:<term>`, `validationLoss`, …:
`training.methods`' `metric_names`, which map TRL's log keys to them). Here the map is read back: `learningRate` is
TRL's `learning_rate`, `reward:<term>` its `rewards/<term>/mean`, `preferenceAccuracy` its `rewards/accuracies`. A
name TRL has no key for (one a later method adds) keeps its own name in snake_case. TensorBoard puts them where
Transformers' TensorBoard callback does (`train/loss`, `eval/loss`), which is where its W&B callback puts them too
(`tensorboard_tag` is W&B's key); MLflow where its MLflow callback does (`loss`, `eval_loss`).
"""

from __future__ import annotations

import math
import re

# Optimize's metric name -> TRL's log key (the inverse of training.methods' metric_names, kept here because the
# CLI may not import training code)
TRL_NAMES = {
    "loss": "loss", "learningRate": "learning_rate", "gradNorm": "grad_norm", "tokens": "num_tokens",
    "tokenAccuracy": "mean_token_accuracy", "entropy": "entropy", "epoch": "epoch",
    # dpo
    "preferenceAccuracy": "rewards/accuracies", "rewardMargin": "rewards/margins", "rewardChosen": "rewards/chosen",
    "rewardRejected": "rewards/rejected",
    # grpo, gspo
    "reward": "reward", "rewardStd": "reward_std", "kl": "kl", "zeroVarianceShare": "frac_reward_zero_std",
    "completionLength": "completions/mean_length", "clippedShare": "completions/clipped_ratio",
    "stepSeconds": "step_time", "generationSeconds": "generation_time",
    # validation passes
    "validationLoss": "loss", "perplexity": "perplexity",
}
# what a metric point carries besides its values (runs' metrics route, `metric_view`)
NOT_VALUES = frozenset({"step", "kind", "attempt", "at"})


def trl_name(name: str) -> str:
    """TRL's key for one of Optimize's metric names; a reward term's `reward:NAME[:std]` is `rewards/NAME/mean|std`."""
    if name in TRL_NAMES:
        return TRL_NAMES[name]
    if name.startswith("reward:"):
        term, _, figure = name[len("reward:"):].partition(":")
        return f"rewards/{term}/{figure or 'mean'}"
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def tensorboard_tag(kind: str, name: str) -> str:
    """`train/learning_rate`, `train/rewards/vowel/mean`, `eval/loss`: Transformers' TensorBoard callback's tags."""
    return f"{'eval' if kind == 'validation' else 'train'}/{trl_name(name)}"


def mlflow_key(kind: str, name: str) -> str:
    """`learning_rate`, `rewards/vowel/mean`, `eval_loss`: Transformers' MLflow callback's keys (MLflow's own rules:
    letters, digits, `_-./ ` and spaces; anything else becomes `_`)."""
    key = trl_name(name)
    return re.sub(r"[^A-Za-z0-9_\-./ ]", "_", f"eval_{key}" if kind == "validation" else key)


def numeric_values(point: dict) -> dict[str, float]:
    """A metric point's figures that are numbers (finite ones: an empty reward term's null, a NaN are left out)."""
    found = {}
    for name, value in point.items():
        if name in NOT_VALUES or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(value):
            found[name] = float(value)
    return found
