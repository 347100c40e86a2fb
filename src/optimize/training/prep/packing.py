"""A supervised run's prepared rows packed into `maxSeqLength` bins on the worker, by TRL's own `pack_dataset`
(strategy bfd: best fit decreasing, each row whole): the bins' token ids and labels are the rows' one after another,
and `seq_lengths` the rows' lengths, from which TRL's padding-free collator restarts the positions at each row
(`workloads.packing` says where packing is on, and counts bins the same way before a row is rendered).

The rows arrive in a Parquet file and the bins leave in another, read and written through Arrow without holding a
Python object a token. The rule is deterministic, so every attempt of a run and every rank of it packs the same
bins.
"""

from __future__ import annotations

from pathlib import Path

from optimize.workloads.packing import Packed


def pack_rows(rows: Path, capacity: int, target: Path) -> Packed:
    """Pack the rows in `rows` into bins of `capacity` tokens, written to `target`."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from datasets import Dataset
    from trl import pack_dataset

    table = pq.read_table(rows, memory_map=True)
    lengths = pc.list_value_length(table.column("input_ids"))
    tokens = int(pc.sum(lengths).as_py() or 0)
    packed = pack_dataset(Dataset(table), capacity, strategy="bfd")
    pq.write_table(packed.data.table, target)
    return Packed(rows=len(table), bins=len(packed), tokens=tokens, capacity=capacity)
