"""A supervised run on a GPU with the kernels resolution gives it by default (Liger's rms_norm, swiglu and rope
where liger-kernel is installed), with its peaks measured: the training peak apart from the start checks' (skipped
where there is no GPU or no liger-kernel)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.gpu.recording_hooks import RecordingHooks

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available() or importlib.util.find_spec("liger_kernel") is None,
                                 reason="needs an NVIDIA GPU and liger-kernel")]


def test_the_default_kernels_train_and_the_training_peak_is_measured_apart_from_the_start_checks(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from optimize.catalog.catalog import load_catalog
    from optimize.catalog.standins import StandIn, build
    from optimize.schemas.plans import RunConfig
    from optimize.schemas.resolved import resolved_config
    from optimize.training.admission.kernels import default_kernels
    from optimize.training.engines import harness

    build(StandIn("smollm2", "small"), tmp_path / "model")
    entry = load_catalog().find("optimize/small-smollm2")
    kernels = default_kernels(entry, "sft", "h200", 1, on_gpu=True)
    assert kernels == {"liger.rms_norm": True, "liger.swiglu": True, "liger.rope": True}
    ids = [[1 + (i * 7 + j) % 1000 for j in range(200)] for i in range(32)]
    pq.write_table(pa.table({"input_ids": ids, "labels": ids}), tmp_path / "rows.parquet")
    config = RunConfig.model_validate({"dataset": "x", "maxSeqLength": 256,
                                       "hyperparams": {"training": {"maxSteps": 6, "batchSize": 8}}}
                                      ).model_dump(by_alias=True, mode="json")
    config["model"].update(precision="bf16", gradientCheckpointing=False, attentionImplementation="sdpa")
    config["liger"] = {path.split(".", 1)[1]: value for path, value in kernels.items()}
    config = resolved_config(config)  # the resolved plan as the worker reads it from its spec
    hooks = RecordingHooks()
    preparing: dict = {}
    outcome = harness.train(str(tmp_path / "model"), config, None, tmp_path / "rows.parquet", 32, None,
                            Path(tmp_path / "work"), hooks, preload=harness.Preload(str(tmp_path / "model"), config),
                            preparing=preparing)
    assert outcome.total_steps == 6 and hooks.checks["status"] != "failed"
    assert outcome.peak_device_gib and outcome.peak_reserved_gib >= outcome.peak_device_gib
    assert outcome.start_check_peak_gib is not None
    assert {"modelLoad", "modelLoadAhead", "trainer", "startCheck"} <= set(preparing)
