"""An OpenAI fine-tuning job's request read by its model, each refusal naming its parameter as OpenAI's error object
does, and the run plan a job becomes: the plan's defaults for "auto" (OpenAI's passes for n_epochs), n_epochs,
batch_size, the default learning rate times the multiplier, DPO's beta, the seed, the suffix as the model's name,
the validation file."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from optimize.catalog.catalog import load_catalog
from optimize.core.errors import Invalid
from optimize.fine_tuning.jobs import _method, _plan, auto_epochs
from optimize.schemas.fine_tuning import FineTuningJobRequest
from optimize.schemas.plans import parse_plan

MODEL = "optimize/tiny-llama-3.2"
ASKED = {"model": MODEL, "training_file": "file-" + "a" * 64}


@pytest.mark.parametrize(("extra", "param", "words"), [
    ({"hyperparameters": {"n_epochs": "3"}}, "hyperparameters.n_epochs", 'n_epochs must be "auto"'),
    ({"hyperparameters": {"n_epochs": 0}}, "hyperparameters.n_epochs", "not 0"),
    ({"hyperparameters": {"batch_size": True}}, "hyperparameters.batch_size", "batch_size must be"),
    ({"hyperparameters": {"learning_rate_multiplier": -1}}, "hyperparameters.learning_rate_multiplier",
     "learning_rate_multiplier must be"),
    ({"method": {"type": "dpo", "dpo": {"hyperparameters": {"beta": 0}}}}, "method.dpo.hyperparameters.beta",
     "beta must be"),
    ({"method": {"type": "reinforcement"}}, "method.type", "grpo run plan"),
    ({"method": {"type": "supervised", "supervised": {"hyperparameters": {"warmup": 1}}}},
     "method.supervised.hyperparameters.warmup", "warmup"),
    ({"seed": -1}, "seed", "seed must be"),
    ({"suffix": "x" * 65}, "suffix", "suffix must be"),
    ({"training_data": "file-x"}, "training_data", "unknown parameter(s): training_data"),
])
def test_a_refusal_names_the_parameter(extra, param, words):
    with pytest.raises(Invalid) as refused:
        FineTuningJobRequest.parse({**ASKED, **extra})
    assert refused.value.details["param"] == param and words in refused.value.message, refused.value.message


def test_a_missing_parameter_is_named():
    with pytest.raises(Invalid) as refused:
        FineTuningJobRequest.parse({"model": MODEL})
    assert refused.value.details["param"] == "training_file" and "required" in refused.value.message


@pytest.mark.parametrize(("extra", "param"), [
    ({"hyperparameters": {"n_epochs": 2}, "method": {"type": "supervised"}}, "hyperparameters"),
    ({"method": {"type": "supervised", "dpo": {}}}, "method.dpo"),
    ({"method": {"type": "dpo", "supervised": {}}}, "method.supervised"),
])
def test_hyperparameters_are_given_in_one_place(extra, param):
    with pytest.raises(Invalid) as refused:
        _method(FineTuningJobRequest.parse({**ASKED, **extra}))
    assert refused.value.details["param"] == param


def _plan_of(extra: dict, name: str | None = None, validation: str | None = None, rows: int = 40) -> dict:
    asked = FineTuningJobRequest.parse({**ASKED, **extra})
    method, hyperparameters = _method(asked)
    entry = load_catalog().find(MODEL)
    return _plan(SimpleNamespace(profiles=[]), "fine-tuning", entry, method, hyperparameters, "fine-tuning/rows:v1",
                 rows, validation, name, asked.seed)


@pytest.mark.parametrize(("rows", "epochs"), [(1, 25), (3, 25), (16, 6), (24, 4), (34, 3), (8000, 3), (9000, 2),
                                               (30_000, 1)])
def test_auto_epochs_see_about_100_rows_of_a_small_file_and_3_passes_otherwise(rows, epochs):
    assert auto_epochs(rows) == epochs


def test_auto_leaves_the_plan_s_defaults_but_the_passes():
    plan = _plan_of({}, rows=40)
    assert plan["config"]["method"] == "sft" and plan["config"]["hyperparams"] == {"training": {"epochs": 3}}
    assert "modelName" not in plan and "seed" not in plan["config"] and plan["execution"] == {"deviceProfile": "cpu"}
    parse_plan(plan)  # a plan admission reads


def test_what_a_job_asks_for_is_the_run_s_plan():
    plan = _plan_of({"seed": 9, "method": {"type": "dpo", "dpo": {"hyperparameters": {
        "n_epochs": 3, "batch_size": 2, "learning_rate_multiplier": 2.5, "beta": 0.3}}}}, name="prefs",
        validation="fine-tuning/held:v2")
    config = parse_plan(plan).config
    assert config.method == "dpo" and config.seed == 9 and config.preference.beta == 0.3
    assert (config.hyperparams.training.epochs, config.hyperparams.training.batch_size) == (3, 2)
    assert config.hyperparams.optimizer.learning_rate == pytest.approx(2.5e-4)
    assert config.validation.dataset == "fine-tuning/held:v2" and plan["modelName"] == "prefs"
    assert config.max_seq_length <= load_catalog().find(MODEL).context_length


def test_the_older_top_level_hyperparameters_are_read_as_a_supervised_job_s():
    plan = _plan_of({"hyperparameters": {"n_epochs": 4}})
    assert plan["config"]["method"] == "sft" and plan["config"]["hyperparams"]["training"] == {"epochs": 4}


def test_auto_passes_follow_the_file_s_rows():
    assert _plan_of({"hyperparameters": {"n_epochs": "auto"}}, rows=10)["config"]["hyperparams"]["training"] == {
        "epochs": 10}
