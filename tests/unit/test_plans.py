"""Run plans: unknown fields refused by path, defaults resolved, stated fields told apart."""

import copy

import pytest

from optimize.core.errors import Invalid
from optimize.schemas.plans import load_plan_text, parse_plan, stated_and_resolved

PLAN = {"kind": "run", "project": "p", "baseModel": "m",
        "config": {"dataset": "a/b", "hyperparams": {"lora": {"rank": 4}}}}


def test_defaults_and_sources():
    fields = stated_and_resolved(parse_plan(PLAN))
    assert fields["config.hyperparams.lora.rank"] == {"value": 4, "source": "file"}
    assert fields["config.hyperparams.lora.alpha"] == {"value": 16, "source": "default"}
    assert fields["config.data.truncation"] == {"value": "error", "source": "default"}
    assert fields["execution.deviceProfile"] == {"value": "cpu", "source": "default"}


def test_every_problem_is_named_by_path():
    bad = {**PLAN, "config": {"dataset": "a/b", "seeds": 1, "hyperparams": {"lora": {"rank": 0}}}, "extra": 1}
    with pytest.raises(Invalid) as refused:
        parse_plan(bad)
    message = refused.value.message
    assert "config.seeds: unknown field" in message and "extra: unknown field" in message
    assert "config.hyperparams.lora.rank" in message


def test_plan_text_yaml_and_json():
    assert load_plan_text("kind: run\n")["kind"] == "run"
    assert load_plan_text('{"kind": "run"}')["kind"] == "run"
    with pytest.raises(Invalid):
        load_plan_text("- a list\n")


def with_key(path: str, value) -> dict:
    """PLAN with the key at `path` (dotted) set to `value`, its camelCase spelling (if any other) taken out."""
    document = copy.deepcopy(PLAN)
    *parents, last = path.split(".")
    node = document
    for key in parents:
        node = node.setdefault(key, {})
    node.pop("baseModel" if last == "base_model" else "", None)
    node[last] = value
    return document


@pytest.mark.parametrize(("path", "camel", "value"), [
    ("base_model", "baseModel", "m"),
    ("config.max_seq_length", "maxSeqLength", 512),
    ("config.hyperparams.training.max_steps", "maxSteps", 3),
    ("config.hyperparams.optimizer.learning_rate", "learningRate", 0.001),
    ("config.hyperparams.lora.adapt_experts", "adaptExperts", True),
    ("config.loss.explicit_loss_mask_column", "explicitLossMaskColumn", "mask"),
    ("execution.device_profile", "deviceProfile", "cpu"),
    ("execution.keep_training_states", "keepTrainingStates", 2),
])
def test_a_snake_case_key_is_refused_by_path_with_the_camel_case_key_suggested(path, camel, value):
    with pytest.raises(Invalid) as refused:
        parse_plan(with_key(path, value))
    assert f"{path}: unknown field (did you mean {camel}?)" in refused.value.message
    assert "Field required" not in refused.value.message  # baseModel spelled base_model is named once
    snake = path.rsplit(".", 1)[-1]
    assert f"each plan key has one spelling ({snake} is spelled {camel})" in refused.value.hint
    spelled = path.rsplit(".", 1)[0] + "." + camel if "." in path else camel
    fields = stated_and_resolved(parse_plan(with_key(spelled, value)))  # the camelCase key applies, as stated
    assert fields[spelled] == {"value": value, "source": "file"}


def test_reference_check_bounds_keep_the_release_notes_spelling_and_refuse_another():
    checks = {"reference": {"mean_logprob_error": 0.1, "max_logprob_error": 2.0, "fp32_max_logprob_error": 0.01}}
    plan = parse_plan({**PLAN, "config": {**PLAN["config"], "checks": checks}})
    assert plan.config.checks.reference.model_dump(by_alias=True) == checks["reference"]
    fields = stated_and_resolved(plan)
    assert fields["config.checks.reference.fp32_max_logprob_error"] == {"value": 0.01, "source": "file"}
    camel = {"reference": {"meanLogprobError": 0.1}}
    with pytest.raises(Invalid) as refused:
        parse_plan({**PLAN, "config": {**PLAN["config"], "checks": camel}})
    assert ("config.checks.reference.meanLogprobError: unknown field (did you mean mean_logprob_error?)"
            in refused.value.message)


def test_other_spellings_and_plain_unknown_keys():
    document = {**PLAN, "config": {**PLAN["config"], "hyperparams": {"training": {"max-steps": 3, "BatchSize": 2}},
                                   "liger": {"rms_norm": True}}, "execution": {"nonsense": 1}}
    with pytest.raises(Invalid) as refused:
        parse_plan(document)
    message = refused.value.message
    assert "config.hyperparams.training.max-steps: unknown field (did you mean maxSteps?)" in message
    assert "config.hyperparams.training.BatchSize: unknown field (did you mean batchSize?)" in message
    assert "execution.nonsense: unknown field;" in message or message.endswith("execution.nonsense: unknown field")
    assert "liger" not in message  # Liger's kernel names are its own (rms_norm, geglu), not plan keys
    assert "one spelling" in refused.value.hint


def test_no_plan_key_is_snake_case():
    from pydantic import BaseModel

    from optimize.schemas.plans import RunPlan

    def keys(model: type[BaseModel], prefix: str) -> list[str]:
        found = []
        for name, info in model.model_fields.items():
            key = f"{prefix}{info.alias or name}"
            found.append(key)
            if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
                found += keys(info.annotation, key + ".")
        return found

    # the reference-check bounds are spelled as the release notes name them
    spec_named = {f"config.checks.reference.{k}" for k in ("mean_logprob_error", "max_logprob_error",
                                                            "fp32_max_logprob_error")}
    assert [key for key in keys(RunPlan, "") if "_" in key and key not in spec_named] == []


@pytest.mark.parametrize("path, value", [
    ("config.maxSeqLength", 10**30), ("config.hyperparams.training.epochs", 10**30),
    ("config.hyperparams.training.maxSteps", 1e30), ("config.hyperparams.training.maxSteps", 10_000_001),
    ("config.hyperparams.training.batchSize", 10**9), ("config.hyperparams.optimizer.learningRate", 1e30),
    ("config.seed", -1), ("execution.gpus", 10**6), ("execution.saveEvery", 10**30),
])
def test_numbers_beyond_any_real_run_are_refused_by_their_path(path, value):
    with pytest.raises(Invalid) as refused:
        parse_plan(with_key(path, value))
    assert path in refused.value.message
