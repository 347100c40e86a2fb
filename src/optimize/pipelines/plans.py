"""A pipeline plan read and checked before anything starts: each stage by its own model, names unique, and every
`@STAGE` naming an earlier stage whose output fits where it is named (a train stage gives a model, a curate or
distill stage a dataset; an evaluate stage gives nothing to name). A train stage's `config.dataset` may list 2 to
`MOST_MIXED` datasets with `mixedDataset` naming where they register together; each item is a slot of its own
(`config.dataset[0]`, …). Pure: the document in, the stages out, or the refusal naming the stage and the field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from optimize.core.errors import Invalid
from optimize.schemas.pipelines import MOST_MIXED, OUTPUTS, STAGES, PipelinePlan, StageBase, stage_reference

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

    @property
    def mix(self) -> list[str] | None:
        """The datasets a train stage mixes, as written (`@STAGE` or references), or None."""
        listed = self.slot("config.dataset") if self.type == "train" else None
        return list(listed) if isinstance(listed, list) else None


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
            for place, value in _places(label, stage, path):
                named = stage_reference(value.removeprefix("model:") if path == "grader" and isinstance(value, str)
                                        else value)
                if named is None:
                    continue
                _check_reference(label, place, named, wanted, seen, stages)
                stage.reads[place] = named
        seen[parsed.name] = str(number)
        stages.append(stage)
    return plan, stages


def _places(label: str, stage: Stage, path: str) -> list[tuple[str, Any]]:
    """The slot at `path` as (place, value) pairs: one, or an item each of a train stage's listed datasets."""
    value = stage.slot(path)
    mixed = stage.document.get("mixedDataset") if stage.type == "train" else None
    if path != "config.dataset" or stage.type != "train":
        return [(path, value)]
    if not isinstance(value, list):
        if mixed is not None:
            raise Invalid(f"{label}: mixedDataset is where the datasets config.dataset lists register together, and "
                          "config.dataset names one dataset",
                          hint="list the datasets to mix in config.dataset, or leave mixedDataset out")
        return [(path, value)]
    if not 2 <= len(value) <= MOST_MIXED or not all(isinstance(item, str) and item.strip() for item in value):
        raise Invalid(f"{label}: config.dataset lists 2 to {MOST_MIXED} datasets (references or @STAGE) to mix",
                      hint="name one dataset, or list several, each a string")
    if len(set(value)) != len(value):
        raise Invalid(f"{label}: config.dataset lists a dataset twice", hint="list each dataset once")
    if not isinstance(mixed, str) or not mixed.strip():
        raise Invalid(f"{label}: config.dataset lists {len(value)} datasets; name mixedDataset (NS/NAME) for them to "
                      "register under together, as the version the run reads",
                      hint="add mixedDataset: NS/NAME to the stage")
    return [(f"{path}[{index}]", item) for index, item in enumerate(value)]


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
        article = "an" if upstream.type[0] in "aeiou" else "a"
        raise Invalid(f"{label}: {path} takes a {wanted}, and @{named} is {article} {upstream.type} stage, which "
                      f"{said}",
                      hint=f"name a {'train' if wanted == 'model' else 'curate or distill'} stage's output here, or "
                           f"a registered {wanted}")
