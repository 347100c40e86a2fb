"""The per-row lengths an analysis stores (a JSONL blob of `[length, trimmed, trained]` per row), as the kinds read
them: an analysis' histogram, the estimates of a run's steps and time, and a run's length check. Rows up to
`TRIM_FROM` tokens are not measured trimmed (their trimmed length is their length)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

TRIM_FROM = 512  # rows longer than this many tokens are also measured with their oldest removable turns removed

LENGTHS_HINT = ("the operator can restore it from a backup of the server's blob store; an analysis that is kept is "
                "not run again")


def lengths_file(blobs, analysis_id: str, sha256: str) -> Path:
    """Where the analysis' per-row figures are held: refused with Gone (410), naming the file and the analysis,
    when they are no longer held (a copy found corrupt is quarantined by the read that finds it, also a 410)."""
    return blobs.held_path(sha256, f"the per-row lengths file sha256:{sha256} of analysis {analysis_id[:12]}",
                           hint=LENGTHS_HINT)


def row_lengths(lengths_file: Path) -> Iterator[int]:
    """Each row's token length, in row order, from the per-row figures an analysis' worker stores."""
    with lengths_file.open() as handle:
        for line in handle:
            yield int(json.loads(line)[0])
