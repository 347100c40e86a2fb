"""A run's hyperparameters, flattened (`runs hparams RUN`): every leaf of its resolved config but the datasets it
reads, by dotted path, with a sha256 of them (two runs of the same hyperparameters have the same sha); and beside
another run's (`--against`), the paths whose values differ."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from optimize.core.documents import leaves
from optimize.schemas import runs as answers
from optimize.store.tables import Run

DATA = frozenset({"config.dataset", "config.validation.dataset"})  # what it reads, not how it trains


def flattened(run: Run) -> dict[str, Any]:
    return {path: value for path, value in sorted(leaves(run.resolved.get("config") or {}, "config.").items())
            if path not in DATA}


def sha(values: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(values, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def hparams(run: Run, against: Run | None = None) -> answers.RunHparams:
    mine = flattened(run)
    if against is None:
        return answers.RunHparams(run_id=run.id, sha=sha(mine), hyperparams=mine)
    theirs = flattened(against)
    differences = [answers.HparamDifference(path=path, value=mine.get(path), against=theirs.get(path))
                   for path in sorted(set(mine) | set(theirs)) if mine.get(path) != theirs.get(path)
                   or (path in mine) != (path in theirs)]
    return answers.RunHparams(run_id=run.id, sha=sha(mine), hyperparams=mine, against=against.id,
                              against_sha=sha(theirs), differences=differences)
