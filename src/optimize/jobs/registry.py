"""The job kinds of this deployment: one line each — the kind, the module declaring it (`KIND`), and the
worker entry `python -m optimize.worker KIND JOB_ID` runs. Modules are imported on first use, so neither the
CLI nor a worker imports the services of kinds it does not touch."""

from __future__ import annotations

import importlib
from functools import cache
from typing import Any

KINDS: dict[str, tuple[str, str]] = {
    "run": ("optimize.training.server.job", "optimize.worker.run:run_training"),
    "analysis": ("optimize.analysis.job", "optimize.worker.analysis:run_analysis"),
    "evaluation": ("optimize.evaluation.job", "optimize.worker.evaluation:run_evaluation"),
    "endpoint": ("optimize.serving.job", "optimize.worker.endpoint:run_endpoint"),
}


@cache
def kind(name: str) -> Any:
    """The declared `JobKind` of that name (KeyError for a name that is no kind)."""
    module, _worker = KINDS[name]
    return importlib.import_module(module).KIND


def kinds() -> list[Any]:
    return [kind(name) for name in KINDS]


def worker_entry(name: str):
    """The function a worker process of that kind runs, given its channel and job id."""
    module, _, function = KINDS[name][1].partition(":")
    return getattr(importlib.import_module(module), function)
