"""A pipeline plan read and checked before anything starts: each stage by its own model, names unique, and every
`@STAGE` naming an earlier stage whose output fits where it is named (a train stage gives a model, a distill stage
a dataset; an evaluate stage gives nothing to name). Pure: the document in, the stages out, or the refusal naming
the stage and the field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from optimize.core.errors import Invalid
from optimize.schemas.pipelines import OUTPUTS, STAGES, PipelinePlan, StageBase, stage_reference

# where each stage type may name an earlier stage's output, and the output each such place takes
SLOTS: dict[str, dict[str, str]] = {
    "train": {"config.dataset": "dataset", "config.validation.dataset": "dataset", "source.model": "model"},
    "evaluate": {"model": "model", "dataset": "dataset", "grader": "model"},
    "distill": {"teacher": "model", "from": "dataset"},
    "curate": {"judge": "model"},
}


@dataclass(frozen=True)
class Stage:
    name: str
    type: str
    document: dict[str, Any]  # the stage as written
    reads: dict[str, str]  # slot path → the stage it names

    def slot(self, path: str) -> Any:
        value: Any = self.document
        for key in path.split("."):
            value = value.get(key) if isinstance(value, dict) else None
        return value


def read_plan(document: Any) -> tuple[PipelinePlan, list[Stage]]:
    plan = PipelinePlan.parse(document)
    stages: list[Stage] = []
    seen: dict[str, str] = {}
    for number, raw in enumerate(plan.stages, 1):
        kind = raw.get("type") if isinstance(raw, dict) else None
        label = f"stage {number}" + (f" ({raw.get('name')})" if isinstance(raw, dict) and raw.get("name") else "")
        if kind not in STAGES:
            raise Invalid(f"{label}: type must be one of {', '.join(STAGES)}",
                          hint="a stage is {name, type, …}: curate (a curation), distill, train (a run) or evaluate")
        model: type[StageBase] = STAGES[kind]
        try:
            parsed = model.parse(raw)
        except Invalid as error:
            raise Invalid(f"{label}: {error.message}", hint=error.hint) from None
        if parsed.name in seen:
            raise Invalid(f"{label}: the name {parsed.name!r} is already stage {seen[parsed.name]}'s",
                          hint="give every stage a name of its own")
        stage = Stage(parsed.name, kind, raw, {})
        for path, wanted in SLOTS[kind].items():
            value = stage.slot(path)
            named = stage_reference(value.removeprefix("model:") if path == "grader" and isinstance(value, str)
                                    else value)
            if named is None:
                continue
            _check_reference(label, path, named, wanted, seen, stages)
            stage.reads[path] = named
        seen[parsed.name] = str(number)
        stages.append(stage)
    return plan, stages


def _check_reference(label: str, path: str, named: str, wanted: str, seen: dict[str, str], earlier: list[Stage]
                     ) -> None:
    if named not in seen:
        raise Invalid(f"{label}: {path} names @{named}, which is not an earlier stage",
                      hint="a stage names the output of a stage before it: "
                           + (", ".join(f"@{s.name}" for s in earlier) or "this is the first stage"))
    upstream = next(s for s in earlier if s.name == named)
    gives = OUTPUTS[upstream.type]
    if gives != wanted:
        said = f"gives a {gives}" if gives else "gives nothing a later stage can name"
        raise Invalid(f"{label}: {path} takes a {wanted}, and @{named} is a {upstream.type} stage, which {said}",
                      hint=f"name a {'train' if wanted == 'model' else 'curate or distill'} stage's output here, or "
                           f"a registered {wanted}")
