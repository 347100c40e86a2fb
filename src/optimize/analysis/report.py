"""Accumulating per-row figures into an analysis report, with memory proportional to the row count only
(compact integer arrays), never to the dataset's bytes."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any

COMMON_LIMITS = (512, 1024, 2048, 4096, 8192, 16384, 32768)
LONGEST_SHOWN = 10
FINDINGS_KEPT = 100


@dataclass
class ReportBuilder:
    kind: str
    lengths: array = field(default_factory=lambda: array("l"))
    trimmed: array = field(default_factory=lambda: array("l"))
    trained_final: int = 0
    trained_all: int = 0
    findings: list[dict[str, Any]] = field(default_factory=list)
    finding_count: int = 0

    def add(self, line: int, measure) -> None:
        self.lengths.append(measure.length)
        self.trimmed.append(measure.trimmed)
        self.trained_final += measure.trained_final
        self.trained_all += measure.trained_all
        for finding in measure.findings:
            self.finding_count += 1
            if len(self.findings) < FINDINGS_KEPT:
                self.findings.append({"line": line, "message": finding.message, "reason": finding.reason})

    def report(self) -> dict[str, Any]:
        ordered = sorted(self.lengths)
        count = len(ordered)
        longest = sorted(range(count), key=lambda i: (-self.lengths[i], i))[:LONGEST_SHOWN]
        noun = "pairs" if self.kind == "preference" else "rows"
        return {
            noun: count,
            "lengths": {
                "median": percentile(ordered, 50), "p90": percentile(ordered, 90),
                "p99": percentile(ordered, 99), "max": ordered[-1] if ordered else 0,
            },
            "limits": [
                {"limit": limit, "over": sum(1 for n in self.lengths if n > limit),
                 "overTrimmed": sum(1 for n in self.trimmed if n > limit)}
                for limit in COMMON_LIMITS
            ],
            "longest": [{"line": i + 1, "length": self.lengths[i]} for i in longest],
            "suggestedMaxSeqLength": suggest(ordered[-1] if ordered else 0),
            "trainedTokens": {"default": self.trained_final, "assistantTurnsAll": self.trained_all},
            "findings": self.findings,
            "findingCount": self.finding_count,
        }


def percentile(ordered: list[int], pct: float) -> int:
    """Nearest-rank percentile of sorted values."""
    if not ordered:
        return 0
    rank = max(1, -(-len(ordered) * pct // 100))
    return ordered[int(rank) - 1]


def suggest(longest: int) -> int:
    """The smallest common limit that holds every row, or the longest row rounded up to 1024."""
    for limit in COMMON_LIMITS:
        if longest <= limit:
            return limit
    return -(-longest // 1024) * 1024
