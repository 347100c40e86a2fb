"""Packing: a supervised run's rows laid best-fit-decreasing into bins of `maxSeqLength` tokens, each row keeping
its own positions (they restart at 0) and attending only to itself, its loss mask as it was.

Where it is on by default (`packs_by_default`): a supervised run whose attention implementation reads variable-length
rows from their positions — flash attention or flex attention on a GPU; on the cpu every implementation Transformers
offers (sdpa and eager build a block-diagonal mask from the positions, flex its block mask). On a GPU under sdpa the
rows still attend only to themselves when packing is stated, through a mask as long as the packed batch, so there it
is left off unless the plan asks for it. Rows with images are never packed: their pixels go with their row.

`bins` counts the bins of a list of lengths by the rule the worker packs with (TRL's `pack_dataset`, strategy bfd):
the longest row first, each into the fullest bin it fits, a new bin where none has room. Which of two bins with the
same room a row goes to changes no later choice, so the count is the same whatever breaks those ties; admission and
the estimates count the bins of an analysis' lengths with it, before the rows are rendered.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass

# the attention implementations that read packed rows' boundaries from their positions without a dense mask
VARIABLE_LENGTH = frozenset({"flash_attention_2", "flash_attention_3", "flex_attention"})
PACKED_METHODS = frozenset({"sft"})


def packs_by_default(method: str, on_cpu: bool, attention: str, images: bool) -> bool:
    """Whether a run packs its rows when its plan leaves `config.packing` out."""
    if method not in PACKED_METHODS or images:
        return False
    return on_cpu or attention in VARIABLE_LENGTH or attention.startswith("kernels-community/flash-attn")


def bins(lengths: Iterable[int], capacity: int) -> int:
    """How many bins of `capacity` tokens rows of these lengths fill, best fit decreasing (a row longer than the
    capacity counts as cut to it, an empty one not at all)."""
    rooms: list[int] = []  # the room left in each bin that has some, ascending
    count = 0
    for length in sorted((min(length, capacity) for length in lengths if length > 0), reverse=True):
        at = bisect.bisect_left(rooms, length)
        if at < len(rooms):
            room = rooms.pop(at) - length
        else:
            count += 1
            room = capacity - length
        if room > 0:
            bisect.insort(rooms, room)
    return count


@dataclass(frozen=True)
class Packed:
    """What packing made of a dataset's rows: how many, into how many bins, and how full the bins are."""

    rows: int
    bins: int
    tokens: int  # the rows' own tokens
    capacity: int  # maxSeqLength: a bin's size

    @property
    def efficiency(self) -> float:
        """The share of the bins' tokens that are the rows' own (1.0: no room left in any bin)."""
        return round(self.tokens / (self.bins * self.capacity), 4) if self.bins else 0.0

    def to_json(self) -> dict[str, float | int]:
        return {"rows": self.rows, "bins": self.bins, "binTokens": self.capacity, "tokens": self.tokens,
                "efficiency": self.efficiency}
