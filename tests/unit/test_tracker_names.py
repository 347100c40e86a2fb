"""The names a run's metrics take in TensorBoard and MLflow (`optimize.core.tracker_names`): TRL's own log keys, read
back from every method's `metric_names`, so a metric a method adds cannot drift from its exported name unnoticed."""

from __future__ import annotations

import math

from optimize.core.tracker_names import mlflow_key, numeric_values, tensorboard_tag, trl_name
from optimize.trackers.mlflow_forwarder import flatten
from optimize.training.methods import METHODS


def test_every_methods_metric_is_exported_under_trls_own_key():
    for method in METHODS.values():
        for key, name in method.metric_names.items():
            assert trl_name(name) == key, (method.name, name)


def test_tags_and_keys_are_where_transformers_callbacks_put_them():
    assert tensorboard_tag("train", "learningRate") == "train/learning_rate"
    assert tensorboard_tag("validation", "validationLoss") == "eval/loss"
    assert tensorboard_tag("train", "reward:vowel") == "train/rewards/vowel/mean"
    assert tensorboard_tag("train", "reward:vowel:std") == "train/rewards/vowel/std"
    assert tensorboard_tag("train", "preferenceAccuracy") == "train/rewards/accuracies"
    assert tensorboard_tag("train", "someNewFigure") == "train/some_new_figure"
    assert mlflow_key("train", "loss") == "loss" and mlflow_key("validation", "validationLoss") == "eval_loss"
    assert mlflow_key("train", "reward:naïve?") == "rewards/na_ve_/mean"  # MLflow's characters only


def test_only_finite_numbers_are_exported():
    point = {"step": 3, "kind": "train", "attempt": 1, "at": "2026-12-05T10:00:00Z", "loss": 1.5, "tokens": 40,
             "reward:judge": None, "kl": math.nan, "flag": True, "note": "text"}
    assert numeric_values(point) == {"loss": 1.5, "tokens": 40.0}


def test_settings_flatten_to_dotted_params():
    resolved = {"config": {"method": "sft", "hyperparams": {"optimizer": {"learningRate": 0.01}}, "liger": {},
                           "reward": {"terms": [{"name": "vowel"}]}}, "execution": {"gpus": 1, "seed": None}}
    assert flatten(resolved) == [("config.method", "sft"), ("config.hyperparams.optimizer.learningRate", "0.01"),
                                 ("config.liger", "{}"), ("config.reward.terms", '[{"name": "vowel"}]'),
                                 ("execution.gpus", "1"), ("execution.seed", "null")]
