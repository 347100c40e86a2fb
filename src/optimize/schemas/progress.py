"""How far a job is, in one vocabulary: `done` of `total` in a `unit` (steps, rows prepared, answers, decisions
answered, rows measured, candidates judged), a distillation's answers `accepted` and a curation's candidates `kept` so
far.

Each kind's worker reports its own progress figures (a run's observedStep of totalSteps, an evaluation's answered of
total, …); the server turns them into a `Count` with the table below and answers it as the item's `count`, so the
CLI's followers (`cli.progress`) and the dashboard read the same figures and never spell a kind's progress keys.
A kind with nothing to count (an endpoint) or an item that has not counted anything yet answers no count.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import Field

from optimize.schemas.common import Answer
from optimize.schemas.phases import RunPhase


class Count(Answer):
    done: int = Field(description="How many units are done")
    total: int | None = Field(default=None, description="How many there are in all, once known")
    unit: str = Field(description="What is counted: steps, rows prepared, answers, decisions answered, rows "
                                  "measured or judged (a curation's candidates)")
    accepted: int | None = Field(default=None, description="A distillation's answers accepted so far")
    kept: int | None = Field(default=None, description="A curation's candidates kept so far")


def _run(phase: str, progress: dict[str, Any]) -> Count | None:
    if phase == RunPhase.PREPARING and progress.get("rowsTotal") and not progress.get("totalSteps"):
        return Count(done=progress.get("rowsDone", 0), total=progress["rowsTotal"], unit="rows prepared")
    if progress.get("totalSteps"):
        return Count(done=progress.get("observedStep", 0), total=progress["totalSteps"], unit="steps")
    return None


def _evaluation(phase: str, progress: dict[str, Any]) -> Count | None:
    return Count(done=progress.get("answered", 0), total=progress.get("total"), unit="answers")


def _distillation(phase: str, progress: dict[str, Any]) -> Count | None:
    if not progress.get("decisions"):  # 0 until its worker has read the source: nothing to count yet
        return None
    return Count(done=progress.get("answered", 0), total=progress["decisions"], unit="decisions answered",
                 accepted=progress.get("accepted", 0))


def _curation(phase: str, progress: dict[str, Any]) -> Count | None:
    return Count(done=progress.get("judged", 0), total=progress.get("total"), unit="judged",
                 kept=progress.get("kept", 0))


def _analysis(phase: str, progress: dict[str, Any]) -> Count | None:
    if not progress.get("rowsTotal") and progress.get("rowsMeasured") is None:
        return None
    return Count(done=progress.get("rowsMeasured", 0), total=progress.get("rowsTotal"), unit="rows measured")


def _comparison(phase: str, progress: dict[str, Any]) -> Count | None:
    return Count(done=progress.get("ended", 0), total=progress.get("total"), unit="evaluations ended")


def _pipeline(phase: str, progress: dict[str, Any]) -> Count | None:
    return Count(done=progress.get("completed", 0), total=progress.get("total"), unit="stages completed")


# by the kind's item name, as its answers and events name it
COUNTED: dict[str, Callable[[str, dict[str, Any]], Count | None]] = {
    "run": _run,
    "evaluation": _evaluation,
    "distillation": _distillation,
    "curation": _curation,
    "analysis": _analysis,
    "comparison": _comparison,
    "pipeline": _pipeline,
}


def count_of(item: str, phase: str, progress: dict[str, Any] | None) -> dict[str, Any] | None:
    """The item's count as its answer carries it (camelCase JSON), or None where it counts nothing yet."""
    counter = COUNTED.get(item)
    count = counter(phase, progress or {}) if counter is not None else None
    return None if count is None else count.model_dump(by_alias=True, exclude_none=True)
