"""On a GPU: two runs sharing one loaded base (`execution.shareBase`), trained by the engine on threads of one
process as the shared worker trains them, make the updates the same runs make alone — their losses and final
adapters — with their turns handed over on the device (skipped where there is no GPU)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.gpu.recording_hooks import RecordingHooks

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]


def _resolved(learning_rate: float, rank: int):
    from optimize.schemas.plans import RunConfig
    from optimize.schemas.resolved import resolved_config

    config = RunConfig.model_validate({"dataset": "x", "maxSeqLength": 256, "seed": 7, "packing": False,
                                       "hyperparams": {"optimizer": {"learningRate": learning_rate},
                                                       "lora": {"rank": rank},
                                                       "training": {"maxSteps": 6, "batchSize": 4}}}
                                      ).model_dump(by_alias=True, mode="json")
    # fp32, so the comparison is exact up to the order of the device's reductions
    config["model"].update(precision="fp32", gradientCheckpointing=False, attentionImplementation="sdpa")
    return resolved_config(config)


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    from optimize.catalog.standins import StandIn, build

    folder = tmp_path_factory.mktemp("model") / "small"
    build(StandIn("smollm2", "small"), folder)
    return folder


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = [[1 + (i * 7 + j) % 1000 for j in range(60 + 10 * (i % 5))] for i in range(24)]
    path = tmp_path_factory.mktemp("rows") / "rows.parquet"
    pq.write_table(pa.table({"input_ids": ids, "labels": ids}), path)
    return path


def _losses(hooks: RecordingHooks) -> list[float]:
    return [values["loss"] for values in hooks.metrics if "loss" in values]


def test_runs_sharing_a_base_on_the_gpu_train_what_each_trains_alone(model, rows, tmp_path):
    from optimize.training.engines import harness
    from optimize.training.engines.shared_base import SharedBase

    settings = {"a": _resolved(2e-3, 8), "b": _resolved(5e-3, 4)}
    alone = {}
    for name, config in settings.items():
        hooks = RecordingHooks()
        outcome = harness.train(str(model), config, None, rows, 24, None, tmp_path / f"alone-{name}", hooks)
        alone[name] = (_losses(hooks), outcome.weights_digest)

    base, shared, errors = SharedBase(list(settings)), {}, []

    def train(name: str) -> None:
        seat, hooks = base.seat(name), RecordingHooks()
        try:
            with seat.held():
                outcome = harness.train(str(model), settings[name], None, rows, 24, None, tmp_path / f"shared-{name}",
                                        hooks, shared=seat)
            shared[name] = (_losses(hooks), outcome.weights_digest)
        except Exception as error:  # noqa: BLE001 - reported by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=train, args=(name,)) for name in settings]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    for name in settings:
        assert shared[name][0] == pytest.approx(alone[name][0], rel=1e-4), name
        assert len(shared[name][0]) == 6
    assert base.tokens["a"] > 0 and base.tokens["b"] > 0  # each run's tokens counted on the shared device
