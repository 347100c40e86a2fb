"""Training methods as recipes: every method a plan can name is declared with the dataset kind it reads; one that
is not trained is refused in the words a plan gets; each method's rules, defaults, metric names and results."""

from __future__ import annotations

import typing
from types import SimpleNamespace

import pytest

from optimize.core.errors import Refused
from optimize.schemas.plans import RunConfig
from optimize.schemas.resolved import ResolvedModelSettings
from optimize.training.methods import HOLDS, METHODS, declared, method_for, reader_of, trained
from optimize.training.methods.base import TRAINER_METRICS

NOT_TRAINED = "method {} is not trained on this deployment yet; methods sft, dpo, grpo and gspo are"


def config(**fields) -> RunConfig:
    return RunConfig.model_validate({"dataset": "x", **fields})


SHARED = ("dataset", "seed", "max_seq_length", "liger", "data", "loss", "validation", "preference", "smoke", "checks")


def resolve(plan: RunConfig, on_cpu: bool = True):
    """The method's resolution of a plan's config, over what admission resolves for every method (as on the cpu)."""
    shared = {name: getattr(plan, name) for name in SHARED} | {"model": ResolvedModelSettings(
        precision="fp32", gradient_checkpointing=False, attention_implementation="sdpa")}
    return method_for(plan.method).resolve(plan, shared, on_cpu)


def test_every_method_a_plan_can_name_is_declared_with_its_dataset_kind():
    nameable = typing.get_args(RunConfig.model_fields["method"].annotation)
    assert set(nameable) == set(METHODS)
    for name, method in METHODS.items():
        assert method.name == name and method.dataset_kind in HOLDS
    assert {name: m.dataset_kind for name, m in METHODS.items()} == {
        "sft": "chat", "dpo": "preference", "grpo": "chat", "gspo": "chat"}
    assert trained() == ["sft", "dpo", "grpo", "gspo"]
    assert reader_of("chat") == "sft" and reader_of("preference") == "dpo"


@pytest.mark.parametrize("name", ["ppo", "rloo"])
def test_a_method_this_deployment_does_not_train_is_refused_with_todays_words(name):
    with pytest.raises(Refused) as refused:
        method_for(name)
    assert refused.value.message == NOT_TRAINED.format(name)
    assert refused.value.hint == "set config.method: sft, dpo, grpo or gspo"


def test_a_reinforcement_method_refuses_datasets_whose_rows_offer_tools():
    grpo = declared("grpo")
    assert grpo.trained and method_for("gspo").importance_sampling == "sequence"
    grpo.admit_datasets([("config.dataset", SimpleNamespace(reference="p/d:v1", tool_rows=0)),
                         ("config.validation.dataset", None)])
    with pytest.raises(Refused, match=r"config.dataset p/d:v1 has 2 row\(s\) that offer tools; the trl engine of a "
                                      "grpo run does not render"):
        grpo.admit_datasets([("config.dataset", SimpleNamespace(reference="p/d:v1", tool_rows=2))])
    with pytest.raises(Refused, match=NOT_TRAINED.format("ppo")):
        declared("ppo")


def test_dpo_refuses_truncation_that_would_cut_a_pair():
    dpo = method_for("dpo")
    dpo.admit(config(method="dpo", data={"truncation": "drop"}))
    with pytest.raises(Refused) as refused:
        dpo.admit(config(method="dpo", data={"truncation": "oldest"}))
    assert refused.value.message == ("data.truncation: oldest applies to chat rows; a dpo run keeps or leaves out "
                                     "whole pairs")
    assert refused.value.hint == "set data.truncation to error or drop"
    method_for("sft").admit(config(data={"truncation": "oldest"}))  # sft trims chat rows


def test_resolved_defaults_gradient_checkpointing_and_the_preference_section():
    assert method_for("sft").gradient_checkpointing(on_cpu=True) is False
    assert method_for("sft").gradient_checkpointing(on_cpu=False) is None  # the memory estimate decides
    assert method_for("dpo").gradient_checkpointing(on_cpu=True) is True
    plan = config(method="dpo", hyperparams={"training": {"batchSize": 4}}, maxSeqLength=512)
    resolved, warnings = resolve(plan, on_cpu=True)
    assert resolved.preference.fused_loss is False
    assert warnings == ["Liger's fused DPO loss needs a GPU; this run on the cpu profile computes TRL's own sigmoid "
                        "loss"]
    resolved, warnings = resolve(plan, on_cpu=False)
    assert warnings == [] and resolved.preference.fused_loss is True
    resolved, warnings = resolve(config(), on_cpu=True)
    assert warnings == [] and resolved.preference.fused_loss is None  # sft leaves the preference section as stated


def test_metric_names():
    assert method_for("sft").metric_names == TRAINER_METRICS
    dpo = method_for("dpo").metric_names
    assert {key: dpo[key] for key in TRAINER_METRICS} == TRAINER_METRICS  # loss, learning rate... as sft's
    assert dpo["rewards/accuracies"] == "preferenceAccuracy" and dpo["rewards/margins"] == "rewardMargin"
    assert dpo["rewards/chosen"] == "rewardChosen" and dpo["rewards/rejected"] == "rewardRejected"


def test_results_a_method_adds_to_the_run():
    plan, _ = resolve(config(method="dpo"), on_cpu=True)
    last = {"loss": 0.6, "preferenceAccuracy": 0.75, "rewardMargin": 0.02}
    assert method_for("dpo").results(plan, last) == {"preference": {
        "accuracy": 0.75, "rewardMargin": 0.02, "lossType": "sigmoid", "beta": 0.1, "loss": "trl"}}
    fused = plan.model_copy(update={"preference": plan.preference.model_copy(update={"fused_loss": True})})
    assert method_for("dpo").results(fused, {})["preference"]["loss"] == "liger-fused"
    assert method_for("sft").results(resolve(config())[0], last) == {}


def test_prepared_columns():
    sft, dpo = method_for("sft"), method_for("dpo")
    rendered = SimpleNamespace(input_ids=[5, 6, 7], loss_mask=[0, 1, 1])
    assert sft.columns == ("input_ids", "labels") and sft.columns_of(rendered) == ([5, 6, 7], [-100, 6, 7])
    pair = SimpleNamespace(prompt_ids=[1], chosen_ids=[2], rejected_ids=[3])
    assert dpo.columns == ("prompt_ids", "chosen_ids", "rejected_ids") and dpo.columns_of(pair) == ([1], [2], [3])
    assert sft.reference_check and not dpo.reference_check  # a pair batch has no labels to compare on


def test_the_liger_kernels_of_a_supervised_run_reach_trl_on_a_gpu(tmp_path, monkeypatch):
    """`config.liger` (stated, or a default kernel of the resolution) becomes TRL's use_liger_kernel with the
    kernels named; nothing on the cpu or when every kernel is off; said, not skipped, where liger-kernel is not
    installed."""
    import importlib.util

    from optimize.training.methods.sft import liger_arguments

    resolved = resolve(config(liger={"rms_norm": True, "geglu": True, "fused_linear_cross_entropy": False}))[0]
    common = {"output_dir": str(tmp_path), "report_to": "none", "use_cpu": True}
    find_spec = importlib.util.find_spec
    if find_spec("liger_kernel") is None:  # this machine (no GPU) lacks it
        with pytest.raises(RuntimeError, match="liger-kernel is not installed on this training machine"):
            method_for("sft").arguments(resolved, common, cuda=True)
        monkeypatch.setattr(importlib.util, "find_spec",
                            lambda name, *rest: object() if name == "liger_kernel" else find_spec(name, *rest))
    args = method_for("sft").arguments(resolved, common, cuda=True)
    assert args.use_liger_kernel is True
    assert args.liger_kernel_config == {"fused_linear_cross_entropy": False, "geglu": True, "rms_norm": True}
    assert method_for("sft").arguments(resolved, common, cuda=False).use_liger_kernel is False
    assert liger_arguments({"rms_norm": False}, cuda=True) == {} and liger_arguments({}, cuda=True) == {}


def test_trl_s_supervised_trainer_takes_the_default_kernels_as_resolved(tmp_path, monkeypatch):
    """The kernels a GPU run resolves by default are ones TRL's SFTTrainer accepts: its own fused LM head computes
    the loss, so Liger's fused_linear_cross_entropy is not among them (TRL refuses it)."""
    import importlib.util

    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from optimize.catalog.catalog import load_catalog
    from optimize.catalog.standins import StandIn, build
    from optimize.training.admission.kernels import default_kernels

    entry = load_catalog().find("optimize/tiny-llama-3.2")
    kernels = default_kernels(entry, "sft", "h200", 1, on_gpu=True, liger=True)
    assert kernels == {"liger.rms_norm": True, "liger.swiglu": True, "liger.rope": True}
    resolved = resolve(config(liger={path.split(".", 1)[1]: value for path, value in kernels.items()}))[0]
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *rest: object() if name == "liger_kernel" else find_spec(name, *rest))
    common = {"output_dir": str(tmp_path / "out"), "report_to": "none", "use_cpu": True, "max_steps": 1}
    args = method_for("sft").arguments(resolved, common, cuda=True)
    build(StandIn("llama3.2"), tmp_path / "model")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "model")
    rows = Dataset.from_list([{"input_ids": [1, 2, 3], "labels": [-100, 2, 3]}])
    trainer = method_for("sft").trainer(model, args, AutoTokenizer.from_pretrained(tmp_path / "model"), None, rows,
                                        None, [])
    assert trainer.args.liger_kernel_config == {"fused_linear_cross_entropy": False, "rms_norm": True, "rope": True,
                                                "swiglu": True}
    stated = resolved.model_copy(update={"liger": {**resolved.liger, "fused_linear_cross_entropy": True}})
    with pytest.raises(ValueError, match="not supported"):  # why admission refuses it (test_run_resolution)
        method_for("sft").trainer(model, method_for("sft").arguments(stated, common, cuda=True),
                                  AutoTokenizer.from_pretrained(tmp_path / "model"), None, rows, None, [])


def test_rollouts_are_generated_by_vllm_on_a_gpu_where_it_is_installed_and_by_transformers_on_the_cpu(monkeypatch):
    import importlib.util

    from optimize.core.errors import Refused
    from optimize.training.methods.reinforcement import rollout_engine, vllm_arguments

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else real(name, *a))
    assert rollout_engine(None, on_cpu=False) == "vllm" and rollout_engine(None, on_cpu=True) == "transformers"
    assert rollout_engine("transformers", on_cpu=False) == "transformers"
    with pytest.raises(Refused, match="rolloutEngine: vllm generates on a GPU"):
        rollout_engine("vllm", on_cpu=True)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    assert rollout_engine(None, on_cpu=False) == "transformers"
    with pytest.raises(Refused, match="vLLM, which is not installed"):
        rollout_engine("vllm", on_cpu=False)
    # colocated, asleep while the policy updates, its context as long as the run's sequences
    assert vllm_arguments("vllm", 512, cuda=True) == {
        "use_vllm": True, "vllm_mode": "colocate", "vllm_enable_sleep_mode": True,
        "vllm_gpu_memory_utilization": 0.3, "vllm_max_model_length": 512}
    assert vllm_arguments("transformers", 512, cuda=True) == {}
    with pytest.raises(RuntimeError, match="has no GPU"):
        vllm_arguments("vllm", 512, cuda=False)
