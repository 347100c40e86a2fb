"""On a GPU with vLLM installed: a grpo run rolls out with vLLM colocated in the training process, and its first
update's greedy rollouts are the ones Transformers generates for the same seed; each update's generation and update
seconds are reported (skipped where there is no GPU or no vLLM)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tests.gpu.recording_hooks import RecordingHooks

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available() or importlib.util.find_spec("vllm") is None,
                                 reason="needs an NVIDIA GPU and vLLM")]

QUESTIONS = ["Is the sky blue?", "Is water wet?", "Is fire cold?", "Do fish swim?"]


class Rollouts(RecordingHooks):
    def __init__(self) -> None:
        super().__init__()
        self.items: dict[int, list[dict]] = {}

    def rollouts(self, step, items):
        self.items[step] = items


def _grpo(engine: str):
    from optimize.schemas.plans import RunConfig
    from optimize.schemas.resolved import resolved_config

    config = RunConfig.model_validate({
        "dataset": "x", "method": "grpo", "maxSeqLength": 128,
        "rlHyperparams": {"training": {"maxSteps": 2, "batchSize": 2}, "generations": 4, "temperature": 0,
                          "maxCompletionLength": 16, "rolloutEngine": engine},
        "reward": {"terms": [{"kind": "contains"}]}}).model_dump(by_alias=True, mode="json")
    config["model"].update(precision="bf16", gradientCheckpointing=False, attentionImplementation="sdpa")
    config["hyperparams"] = None
    config["rlHyperparams"]["importanceSampling"] = "token"
    config["reward"]["terms"][0]["name"] = "contains"
    return resolved_config(config)


def _train(model: Path, engine: str, tmp_path: Path) -> Rollouts:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from optimize.training.engines import harness

    rows = tmp_path / f"{engine}.parquet"
    # the rows as the worker prepares them: the rendered prompt, and what the reward reads (`training.prep.prompts`)
    samples = [json.dumps({"prompt": [{"role": "user", "content": q}], "expected": "yes", "fields": {}})
               for q in QUESTIONS]
    pq.write_table(pa.table({"prompt": [f"Question: {q}\nAnswer:" for q in QUESTIONS], "sample": samples}), rows)
    hooks = Rollouts()
    harness.train(str(model), _grpo(engine), None, rows, 4, None, tmp_path / engine, hooks)
    return hooks


def test_vllm_rolls_out_what_transformers_does_for_a_seed_and_each_update_is_timed(tmp_path):
    from optimize.catalog.standins import StandIn, build

    build(StandIn("smollm2", "small"), tmp_path / "model")
    with_vllm = _train(tmp_path / "model", "vllm", tmp_path)
    with_transformers = _train(tmp_path / "model", "transformers", tmp_path)
    first = [item["completion"] for item in with_vllm.items[1]]
    assert first == [item["completion"] for item in with_transformers.items[1]]
    for metrics in (with_vllm.metrics, with_transformers.metrics):
        timed = [m for m in metrics if "generationSeconds" in m]
        assert timed and all(0 < m["generationSeconds"] < m["stepSeconds"] for m in timed)
