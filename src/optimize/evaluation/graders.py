"""An evaluation's report from its grades. How one answer is graded is `optimize.scoring.graders`, shared with a
distillation's acceptance grader."""

from __future__ import annotations

from typing import Any

from optimize.scoring.graders import Grade


def report(grades: list[Grade]) -> dict[str, Any]:
    """Mean score over scored examples, exact-match rate, and per-field accuracy worst first."""
    scored = [g for g in grades if g.score is not None]
    totals: dict[str, list[int]] = {}
    for grade in scored:
        for path, ok in grade.fields.items():
            totals.setdefault(path, [0, 0])
            totals[path][0] += int(ok)
            totals[path][1] += 1
    per_field = sorted(({"field": path, "accuracy": hits / count, "examples": count}
                        for path, (hits, count) in totals.items()), key=lambda f: (f["accuracy"], f["field"]))
    return {
        "meanScore": sum(g.score for g in scored) / len(scored) if scored else None,
        "exactMatchRate": sum(g.score == 1.0 for g in scored) / len(scored) if scored else None,
        "perFieldAccuracy": per_field,
        "scored": len(scored),
        "unscored": len(grades) - len(scored),
    }
