"""On a GPU: a qlora run trains a LoRA adapter on the base model loaded at 4 bits (bitsandbytes), its start check
passing at the run's precision and its MFU counted on the 4N basis; a packed supervised run trains under flex
attention (skipped where there is no GPU, and the qlora test where bitsandbytes is not installed)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.gpu.recording_hooks import RecordingHooks

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]


def _resolved(model: dict, packing: bool = False):
    from optimize.schemas.plans import RunConfig
    from optimize.schemas.resolved import resolved_config

    config = RunConfig.model_validate({"dataset": "x", "maxSeqLength": 256,
                                       "hyperparams": {"training": {"maxSteps": 4, "batchSize": 4}}}
                                      ).model_dump(by_alias=True, mode="json")
    config["model"].update(precision="bf16", gradientCheckpointing=False, **model)
    config["packing"] = packing
    return resolved_config(config)  # the resolved plan as the worker reads it from its spec


def _rows(tmp_path: Path, lengths: list[int]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = [[1 + (i * 7 + j) % 1000 for j in range(length)] for i, length in enumerate(lengths)]
    pq.write_table(pa.table({"input_ids": ids, "labels": ids}), tmp_path / "rows.parquet")
    return tmp_path / "rows.parquet"


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    from optimize.catalog.standins import StandIn, build

    folder = tmp_path_factory.mktemp("model") / "small"
    build(StandIn("smollm2", "small"), folder)
    return folder


@pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is None, reason="needs bitsandbytes (the gpu extra)")
def test_a_qlora_run_trains_an_adapter_on_a_4_bit_base(model, tmp_path):
    from optimize.core.flops import utilisation
    from optimize.training.engines import harness

    config = _resolved({"attentionImplementation": "sdpa", "adapter": "qlora"})
    hooks = RecordingHooks()
    outcome = harness.train(str(model), config, None, _rows(tmp_path, [200] * 16), 16, None, tmp_path / "work", hooks)
    assert outcome.total_steps == 4 and hooks.checks["status"] != "failed"
    assert outcome.modules and outcome.weights_digest and outcome.base_parameters > 0
    assert utilisation(outcome.base_parameters, 1000.0, outcome.device, "qlora").basis == "4N"


def test_a_packed_run_trains_under_flex_attention(model, tmp_path):
    from optimize.training.engines import harness
    from optimize.training.prep.packing import pack_rows

    config = _resolved({"attentionImplementation": "flex_attention"}, packing=True)
    packed = pack_rows(_rows(tmp_path, [40, 200, 90, 150, 60, 30, 120, 250] * 2), 256, tmp_path / "packed.parquet")
    assert packed.bins < packed.rows
    hooks = RecordingHooks()
    outcome = harness.train(str(model), config, None, tmp_path / "packed.parquet", packed.bins, None,
                            tmp_path / "work", hooks)
    assert outcome.total_steps == 4 and hooks.checks["status"] != "failed"
