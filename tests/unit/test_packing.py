"""Packing: the bins a run's rows fill (counted before the rows are rendered, packed by TRL on the worker), where it
is on by default, and that a packed row trains exactly as it would alone — each row's loss on the stand-in model
the same packed as unpacked, and the reference check's log-probabilities the same."""

from __future__ import annotations

import random

import pytest

from optimize.workloads.packing import Packed, bins, packs_by_default


@pytest.mark.parametrize("capacity", [16, 64, 100, 1024])
def test_the_bins_counted_before_rendering_are_those_trl_packs(capacity):
    from datasets import Dataset
    from trl import pack_dataset

    draw = random.Random(capacity)
    for _ in range(20):
        lengths = [draw.choice([1, 2, capacity // 3, capacity // 2, capacity, draw.randint(1, capacity)])
                   for _ in range(draw.randint(1, 60))]
        rows = Dataset.from_dict({"input_ids": [[7] * n for n in lengths]})
        assert bins(lengths, capacity) == len(pack_dataset(rows, capacity, strategy="bfd")), lengths


def test_bins_of_nothing_and_of_rows_longer_than_a_bin():
    assert bins([], 8) == 0
    assert bins([0, 0], 8) == 0
    assert bins([20, 3], 8) == 2  # a longer row counts as cut to the bin: it fills one
    assert bins([4, 4, 4, 4], 8) == 2


def test_efficiency_is_the_rows_tokens_over_the_bins_tokens():
    assert Packed(rows=3, bins=2, tokens=12, capacity=8).efficiency == 0.75
    assert Packed(rows=0, bins=0, tokens=0, capacity=8).to_json() == {
        "rows": 0, "bins": 0, "binTokens": 8, "tokens": 0, "efficiency": 0.0}


@pytest.mark.parametrize(("method", "on_cpu", "attention", "images", "packs"), [
    ("sft", True, "sdpa", False, True),
    ("sft", True, "eager", False, True),
    ("sft", False, "sdpa", False, False),  # a mask as long as the packed batch: off unless stated
    ("sft", False, "flash_attention_2", False, True),
    ("sft", False, "flex_attention", False, True),
    ("sft", True, "sdpa", True, False),  # pixels go with their own row
    ("dpo", True, "sdpa", False, False),
    ("grpo", False, "flash_attention_2", False, False),
])
def test_where_packing_is_on_by_default(method, on_cpu, attention, images, packs):
    assert packs_by_default(method, on_cpu, attention, images) is packs


def test_a_method_that_does_not_pack_refuses_it_stated_and_sft_refuses_it_with_images():
    from optimize.core.errors import Refused
    from optimize.training.methods import METHODS

    with pytest.raises(Refused, match="a dpo run's rows are not packed"):
        METHODS["dpo"].packing(True, True, "sdpa", False)
    assert METHODS["grpo"].packing(False, True, "sdpa", False) is None
    with pytest.raises(Refused, match="name images"):
        METHODS["sft"].packing(True, True, "sdpa", True)
    assert METHODS["sft"].packing(None, False, "sdpa", False) is False
    assert METHODS["sft"].packing(True, False, "sdpa", False) is True


@pytest.fixture(scope="module", params=["sdpa", "eager"])
def rows_and_model(request, tmp_path_factory):
    """Rows of several lengths and the stand-in under sdpa and eager (flex attention, which compiles its kernel
    first, is trained packed on a GPU: tests/gpu/test_qlora_and_packing.py)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch
    from transformers import AutoModelForCausalLM

    from tests.conftest import built_standin

    model = AutoModelForCausalLM.from_pretrained(built_standin("optimize/tiny-llama-3.2"),
                                                 attn_implementation=request.param).eval()
    draw = torch.Generator().manual_seed(0)
    rows = []
    for length in (17, 40, 9, 33, 25, 12, 50, 64, 3):
        ids = torch.randint(3, 200, (length,), generator=draw).tolist()
        # the prompt masked, the answer trained, as a rendered row's labels are
        rows.append({"input_ids": ids, "labels": [-100] * (length // 2) + ids[length // 2:]})
    path = tmp_path_factory.mktemp("packing") / "rows.parquet"
    pq.write_table(pa.table({"input_ids": [r["input_ids"] for r in rows], "labels": [r["labels"] for r in rows]}),
                   path)
    return rows, model, path


def _row_loss(logits, labels):
    import torch

    picked = torch.log_softmax(logits[:-1].float(), dim=-1)
    targets = torch.tensor(labels[1:])
    kept = targets != -100
    return float(-picked[kept].gather(-1, targets[kept].unsqueeze(-1)).mean())


def _packed_batch(rows_path, tmp_path, capacity):
    import pyarrow.parquet as pq
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    from optimize.training.prep.packing import pack_rows

    packed = pack_rows(rows_path, capacity, tmp_path / "packed.parquet")
    bins_ = pq.read_table(tmp_path / "packed.parquet").to_pylist()
    # the collator TRL's supervised trainer builds for packed rows (padding-free)
    return packed, DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True)(bins_)


def test_each_rows_loss_is_the_same_packed_as_unpacked(rows_and_model, tmp_path):
    import torch

    rows, model, path = rows_and_model
    packed, batch = _packed_batch(path, tmp_path, 64)
    assert packed.rows == len(rows) and packed.bins == bins([len(r["input_ids"]) for r in rows], 64) < len(rows)
    assert packed.tokens == sum(len(r["input_ids"]) for r in rows)
    with torch.no_grad():
        alone = [_row_loss(model(input_ids=torch.tensor([r["input_ids"]]), use_cache=False).logits[0], r["labels"])
                 for r in rows]
        # as TRL's supervised trainer forwards a batch: no cache, the positions restarting at each row
        together = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False).logits[0]
    positions = batch["position_ids"][0]
    starts = [*(positions == 0).nonzero().flatten().tolist(), len(positions)]
    ids = batch["input_ids"][0].tolist()
    seen = set()
    for start, end in zip(starts, starts[1:], strict=False):
        index = next(i for i, r in enumerate(rows) if r["input_ids"] == ids[start:end] and i not in seen)
        seen.add(index)
        assert _row_loss(together[start:end], rows[index]["labels"]) == pytest.approx(alone[index], abs=1e-5)
    assert seen == set(range(len(rows)))
    # the first token of each row is no row's target: what followed the row before it is not trained
    assert (batch["labels"][0][positions == 0] == -100).all()


def test_the_reference_check_reads_a_packed_batch_row_by_row(rows_and_model, tmp_path):
    import torch

    from optimize.training.engines.checks import longest_row, token_logprobs

    rows, model, path = rows_and_model
    _, batch = _packed_batch(path, tmp_path, 64)
    packed = token_logprobs(model, batch)
    alone = torch.cat([token_logprobs(model, {"input_ids": torch.tensor([r["input_ids"]])}) for r in rows])
    assert packed.numel() == alone.numel() == sum(len(r["input_ids"]) - 1 for r in rows)
    assert torch.sort(packed).values == pytest.approx(torch.sort(alone).values, abs=1e-5)
    assert longest_row(batch) == 64
