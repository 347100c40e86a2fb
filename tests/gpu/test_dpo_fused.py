"""A dpo run computes Liger's fused DPO loss on a GPU (skipped where there is no GPU or no liger-kernel): the engine
trains a stand-in on pairs rendered by `optimize.chat` and reports accuracy and margin per update."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tests.gpu.recording_hooks import RecordingHooks

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available() or importlib.util.find_spec("liger_kernel") is None,
                                 reason="needs an NVIDIA GPU and liger-kernel")]


def test_the_fused_dpo_loss_trains_and_reports_accuracy(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from optimize.catalog.standins import StandIn, build
    from optimize.chat.families import template_kwargs
    from optimize.chat.render import ChatRenderer
    from optimize.schemas.plans import RunConfig
    from optimize.schemas.resolved import resolved_config
    from optimize.training.engines import harness
    from optimize.training.prep.pairs import PairFitter

    build(StandIn("smollm2", "small"), tmp_path / "model")
    renderer = ChatRenderer.from_pretrained(str(tmp_path / "model"), template_kwargs("smollm2"))
    fitter = PairFitter(renderer, 256, "error")
    pairs = [fitter.fit({"prompt": [{"role": "user", "content": f"ticket {i}"}],
                         "chosen": {"role": "assistant", "content": json.dumps({"label": "billing"})},
                         "rejected": {"role": "assistant", "content": "no idea"}}, f"line {i}") for i in range(16)]
    names = ("prompt_ids", "chosen_ids", "rejected_ids")
    table = pa.table({n: [getattr(p, n) for p in pairs] for n in names})
    pq.write_table(table, tmp_path / "pairs.parquet")
    config = RunConfig.model_validate({"dataset": "x", "method": "dpo", "maxSeqLength": 256,
                                       "hyperparams": {"training": {"maxSteps": 6, "batchSize": 4}}}
                                      ).model_dump(by_alias=True, mode="json")
    config["model"].update(precision="bf16", gradientCheckpointing=True, attentionImplementation="sdpa")
    config["preference"]["fusedLoss"] = True
    config = resolved_config(config)  # the resolved plan as the worker reads it from its spec
    hooks = RecordingHooks()
    outcome = harness.train(str(tmp_path / "model"), config, None, tmp_path / "pairs.parquet", 16, None,
                            Path(tmp_path / "work"), hooks)
    assert outcome.total_steps == 6 and "preferenceAccuracy" in hooks.metrics[-1]
