"""The reward check of a reinforcement run's dry run: each term of `config.reward` scores the first rows' own final
answers (the dataset's reference answers stand in for completions), so a plan learns before a device whether its
terms apply to its rows — how many they score, their mean and spread, and the errors a bundle raises, by line.

A term that scores none of the reference answers, or raises on them, is worth fixing before a run pays for
rollouts; the share of prompt groups whose rewards do not vary needs sampled completions, which a dry run does not
make (it is measured per update by the run: `zeroVarianceShare`).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

ROWS = 64  # reference answers scored
ERRORS_NAMED = 3


def reward_check(config: dict[str, Any], objects: list[dict[str, Any]], open_object, bundle_path) -> list[dict]:
    """Per term: rows scored, unscored, mean, standard deviation, and the first errors by line.
    `open_object(sha256)` opens a shard; `bundle_path(sha256)` is a bundle archive's local path."""
    import orjson

    from optimize.scoring import build_member, sample_from_row

    rows: list[tuple[int, dict[str, Any]]] = []
    line = 0
    for item in objects:
        with open_object(item["sha256"]) as handle:
            for raw in handle:
                line += 1
                rows.append((line, orjson.loads(raw.removeprefix(b"\xef\xbb\xbf"))))
                if len(rows) >= ROWS:
                    break
        if len(rows) >= ROWS:
            break
    samples = [sample_from_row(row, _answer_text(row)) for _, row in rows]
    checked = []
    for term in config["reward"]["terms"]:
        source = Path(bundle_path(term["bundleSha256"])) if term.get("bundleSha256") else None
        member = build_member({k: v for k, v in term.items() if k not in ("bundleSha256",)}, source)
        try:
            scores = member.score(samples)
        finally:
            member.close()
        values = [s.value for s in scores if s.value is not None]
        errors = [{"line": line, "error": s.error} for (line, _), s in zip(rows, scores, strict=True) if s.error]
        checked.append({"term": term["name"], "rows": len(rows), "scored": len(values),
                        "unscored": len(rows) - len(values), "mean": statistics.fmean(values) if values else None,
                        "std": statistics.pstdev(values) if len(values) > 1 else None,
                        "errors": len(errors), "firstErrors": errors[:ERRORS_NAMED]})
    return checked


def _answer_text(row: dict[str, Any]) -> str:
    message = (row.get("messages") or [{}])[-1]
    content = message.get("content")
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""
