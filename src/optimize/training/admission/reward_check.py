"""The reward check of a reinforcement run's dry run: each term of `config.reward` scores the first rows' own final
answers (the dataset's reference answers stand in for completions), so a plan learns before a device whether its
terms apply to its rows — how many they score, their mean and spread, and the errors a bundle raises, by line.

A term that scores none of the reference answers, or raises on them, is worth fixing before a run pays for
rollouts. The share of prompt groups whose rewards do not vary needs sampled completions, which a dry run does not
make: `groups_check` re-scores, with the run's whole reward, the answers a sampling evaluation already sampled from
the model the run starts from on the same dataset version (`akka training evaluations start --generations N`, or
`akka registry bundles check --model`), and the dry run warns when the reward is constant on most groups. The run
measures it per update too (`zeroVarianceShare`).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from optimize.schemas.resolved import ResolvedReinforcement, ResolvedTerm

ROWS = 64  # reference answers scored
ERRORS_NAMED = 3


def reward_check(config: ResolvedReinforcement, objects: list[dict[str, Any]], open_object, bundle_path) -> list[dict]:
    """Per term: rows scored, unscored, mean, standard deviation, and the first errors by line.
    `open_object(sha256)` opens a shard; `bundle_path(sha256)` is a bundle archive's local path."""
    import orjson

    from optimize.scoring import sample_from_row

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
    for term in config.reward.terms:
        if term.kind == "judge":  # a judge is a model: the server loads none, so it is not checked here
            judge = term.judge_reference or term.model
            checked.append({"term": term.name, "rows": len(rows), "scored": 0, "unscored": len(rows),
                            "mean": None, "std": None, "errors": 0, "firstErrors": [], "checked": False,
                            "note": f"not checked on the server: the judge {judge} is a model, which a dry run does "
                                    "not load; the run asks it to grade every completion"})
            continue
        member = _member(term, bundle_path)
        try:
            scores = member.score(samples)
        finally:
            member.close()
        values = [s.value for s in scores if s.value is not None]
        errors = [{"line": line, "error": s.error} for (line, _), s in zip(rows, scores, strict=True) if s.error]
        checked.append({"term": term.name, "rows": len(rows), "scored": len(values),
                        "unscored": len(rows) - len(values), "mean": statistics.fmean(values) if values else None,
                        "std": statistics.pstdev(values) if len(values) > 1 else None,
                        "errors": len(errors), "firstErrors": errors[:ERRORS_NAMED]})
    return checked


def newest_sampling(session, model_reference: str, dataset_digest: str) -> tuple[Any, list[tuple[int, list[str]]]]:
    """The newest completed sampling evaluation of `model_reference` on the dataset version `dataset_digest`, and
    its groups: (line, the answers sampled for that row); (None, []) when there is none."""
    from sqlalchemy import select

    from optimize.schemas.phases import EvaluationPhase
    from optimize.store.tables import Evaluation, EvaluationPrediction

    done = session.scalars(select(Evaluation).where(
        Evaluation.model_reference == model_reference, Evaluation.dataset_digest == dataset_digest,
        Evaluation.phase == EvaluationPhase.COMPLETED.value).order_by(Evaluation.created_at.desc()).limit(50)).all()
    chosen = next((e for e in done if (e.model or {}).get("sampling")), None)
    if chosen is None:
        return None, []
    held = session.scalars(select(EvaluationPrediction).where(EvaluationPrediction.evaluation_id == chosen.id)
                           .order_by(EvaluationPrediction.line)).all()
    return chosen, [(p.line, [s.get("answer") or "" for s in p.samples]) for p in held if p.samples]


def groups_check(config: ResolvedReinforcement, groups: list[tuple[int, list[str]]], objects: list[dict[str, Any]],
                 open_object, bundle_path) -> dict[str, Any]:
    """The run's reward over sampled groups: `groups` holds (line, the answers sampled for that row). Each answer is
    scored by every term (clipped as the run clips), its reward the weighted sum of the terms that apply; a group is
    constant when its rewards do not vary (under normalizeThenSum, when no term varies within it)."""
    import orjson

    from optimize.scoring import sample_from_row
    from optimize.scoring.groups import zero_variance_share

    wanted = {line for line, _ in groups}
    rows: dict[int, dict[str, Any]] = {}
    line = 0
    for item in objects:
        with open_object(item["sha256"]) as handle:
            for raw in handle:
                line += 1
                if line in wanted:
                    rows[line] = orjson.loads(raw.removeprefix(b"\xef\xbb\xbf"))
        if len(rows) == len(wanted):
            break
    kept = [(line, answers) for line, answers in groups if line in rows]
    samples = [sample_from_row(rows[line], answer) for line, answers in kept for answer in answers]
    per_term = []
    terms = config.reward.terms
    for term in terms:
        if term.kind == "judge":  # a judge is a model, which the server does not load: left out of the totals
            per_term.append([None] * len(samples))
            continue
        member = _member(term, bundle_path)
        try:
            low, high = term.clip or (None, None)
            per_term.append([None if s.value is None else s.value if low is None else min(max(s.value, low), high)
                             for s in member.score(samples)])
        finally:
            member.close()
    weights = [term.weight for term in terms]
    totals = []
    for index in range(len(samples)):
        present = [(values[index], w) for values, w in zip(per_term, weights, strict=True) if values[index] is not None]
        totals.append(sum(v * w for v, w in present) if present else None)
    bounds, start = [], 0
    for _, answers in kept:
        bounds.append((start, start + len(answers)))
        start += len(answers)
    if config.reward.aggregation == "normalizeThenSum":  # constant only when every term is
        varied = [[tuple(values[i] for values in per_term) for i in range(a, b)] for a, b in bounds]
        share, counted = zero_variance_share([hash(answer) for answer in group] for group in varied)
    else:
        share, counted = zero_variance_share(totals[a:b] for a, b in bounds)
    scored = [t for t in totals if t is not None]
    return {"prompts": len(kept), "answers": len(samples), "groups": counted, "zeroVarianceShare": share,
            "meanReward": statistics.fmean(scored) if scored else None,
            "leftOut": [term.name for term in terms if term.kind == "judge"]}


def _member(term: ResolvedTerm, bundle_path):
    """A term's scoring member on the server: a rule term's bundle from its archive's local path."""
    from optimize.scoring import build_member
    from optimize.scoring.terms import member_spec

    source = Path(bundle_path(term.bundle_sha256)) if term.bundle_sha256 else None
    return build_member(member_spec(term.member_spec()), source)


def _answer_text(row: dict[str, Any]) -> str:
    message = (row.get("messages") or [{}])[-1]
    content = message.get("content")
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""
