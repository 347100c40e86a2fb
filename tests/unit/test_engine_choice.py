"""Which engine an endpoint answers with (`serving.engine.engine_for`): Transformers' continuous batching where
vLLM is missing or not asked for, a clear refusal for an unknown choice or vLLM asked for where it cannot run, and
vLLM's log-probabilities read into the steps the completers take."""

from __future__ import annotations

from collections import namedtuple

import pytest

from optimize.serving import engine as serving_engine
from optimize.serving.vllm_serving import _step

pytest.importorskip("torch")


def test_an_unknown_engine_or_vllm_where_it_cannot_run_is_refused_clearly(monkeypatch, tmp_path):
    monkeypatch.setenv("OPTIMIZE_ENDPOINT_ENGINE", "tgi")
    with pytest.raises(ValueError, match="one of auto, transformers, vllm"):
        serving_engine.engine_for(tmp_path)
    monkeypatch.setattr("optimize.serving.vllm_serving.available", lambda: False)
    monkeypatch.setenv("OPTIMIZE_ENDPOINT_ENGINE", "vllm")
    with pytest.raises(RuntimeError, match="vLLM is not installed here or no GPU is visible"):
        serving_engine.engine_for(tmp_path)


def test_auto_answers_with_transformers_where_vllm_is_missing(monkeypatch, tmp_path):
    from optimize.catalog.standins import StandIn, build

    build(StandIn("llama3.2"), tmp_path / "model")
    monkeypatch.setattr("optimize.serving.vllm_serving.available", lambda: False)
    monkeypatch.delenv("OPTIMIZE_ENDPOINT_ENGINE", raising=False)
    engine = serving_engine.engine_for(tmp_path / "model")
    try:
        assert isinstance(engine, serving_engine.ServingModel)
    finally:
        engine.close()


def test_vllm_log_probabilities_become_steps_with_the_likeliest_alternatives_in_rank_order():
    logprob = namedtuple("Logprob", "logprob rank decoded_token")
    position = {7: logprob(-2.5, 3, None), 3: logprob(-0.1, 1, None), 9: logprob(-1.0, 2, None)}
    step = _step(7, position, 2)
    assert step.token == 7 and step.logprob == -2.5 and step.top == ((3, -0.1), (9, -1.0))
    assert _step(7, position, None).logprob is None  # not asked for
    assert _step(7, position, 0).top == ()
