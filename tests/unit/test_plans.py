"""Run plans: unknown fields refused by path, defaults resolved, stated fields told apart."""

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
