"""An analysis' row lengths as a histogram: equal-width bins from 1 token to the longest row, read from the per-row
figures its worker stored (a JSONL blob of `[length, trimmed, trained]` per row, in row order), with the rows over
each common maxSeqLength limit up to the first one the longest row fits."""

from __future__ import annotations

import math
from pathlib import Path

from optimize.analysis.report import COMMON_LIMITS
from optimize.schemas.analyses import LengthHistogram
from optimize.workloads.lengths import row_lengths


def histogram(analysis_id: str, lengths_file: Path, bins: int) -> LengthHistogram:
    lengths = list(row_lengths(lengths_file))
    longest = max(lengths, default=0)
    width = max(1, math.ceil(longest / bins))
    counts = [0] * max(1, math.ceil(longest / width))
    for length in lengths:
        counts[max(0, length - 1) // width] += 1
    shown = [limit for limit in COMMON_LIMITS if limit < longest]
    shown += [limit for limit in COMMON_LIMITS if limit >= longest][:1]
    return LengthHistogram(
        analysis_id=analysis_id, rows=len(lengths), longest=longest, width=width,
        bins=[{"from": index * width + 1, "to": (index + 1) * width, "rows": count}
              for index, count in enumerate(counts)],
        limits=[{"limit": limit, "over": sum(1 for n in lengths if n > limit)} for limit in shown])
