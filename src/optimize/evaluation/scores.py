"""A project's scores table: for one dataset and grader (by default those of its newest completed evaluation),
the base model's score as the baseline and one column per training configuration (a run's config name, else its
config hash), each the newest completed evaluation of a model the project trained with it, grouped by base model
commit. A grader is
named as `--grader` names it (an unknown one is refused); a `bundle:` grader is resolved as an evaluation resolves
it (its alias or latest version to `NS/NAME:vN`, the function to `compute_score` when not named), so
`bundle:support/triage#triage` finds the evaluations kept as `bundle:support/triage:v1#triage:compute_score`.
Sampling evaluations and those of the first rows only (`--generations`, `--rows`) measure something else than a
model's greedy answers to every row, and are left out of the table."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from optimize.deployment import Deployment
from optimize.evaluation.phases import EvaluationPhase
from optimize.projects.service import find_project
from optimize.registry.bundles import resolve_bundle
from optimize.registry.models import resolve_model_reference
from optimize.schemas.projects import Scores
from optimize.scoring.graders import parse_bundle_grader, parse_grader
from optimize.store.tables import Evaluation, Run


def scores(deployment: Deployment, project: str, dataset: str | None = None, grader: str | None = None
           ) -> Scores:
    if grader:
        grader = parse_grader(grader)  # an unknown grader is refused, naming the graders there are
    with deployment.store.transaction() as session:
        name = find_project(session, project).name
        if grader and grader.startswith("bundle:"):
            bundle = parse_bundle_grader(grader)
            grader = bundle.resolved(*resolve_bundle(session, bundle.reference)).text
        done = [e for e in session.scalars(select(Evaluation).where(Evaluation.project == name,
                                                                   Evaluation.phase == EvaluationPhase.COMPLETED.value)
                                           .order_by(Evaluation.created_at.desc())).all()
                if not (e.model.get("sampling") or e.model.get("rows"))]
        if dataset:
            done = [e for e in done if e.dataset_reference.startswith(dataset)]
        if grader:
            done = [e for e in done if e.grader == grader]
        if not done:
            return Scores(project=name, dataset=dataset, grader=grader, groups=[])
        chosen_dataset, chosen_grader = done[0].dataset_reference, done[0].grader
        groups: dict[str, dict[str, Any]] = {}
        for item in done:  # newest first: the first of each column stays
            if item.dataset_reference != chosen_dataset or item.grader != chosen_grader:
                continue
            group = groups.setdefault(item.model["baseCommit"], {
                "baseModel": item.model["baseEntryId"], "baseCommit": item.model["baseCommit"], "baseline": None,
                "columns": {}})
            cell = {"model": item.model_reference, "evaluationId": item.id,
                    "meanScore": (item.report or {}).get("meanScore")}
            if item.model["kind"] != "adapter":
                group["baseline"] = group["baseline"] or cell
                continue
            column = _configuration(session, item.model_reference)
            group["columns"].setdefault(column, cell)
        return Scores(project=name, dataset=chosen_dataset, grader=chosen_grader,
                      groups=[{**g, "columns": [{"configuration": k, **v} for k, v in g["columns"].items()]}
                              for g in groups.values()])


def _configuration(session, reference: str) -> str:
    """The column a trained model falls in: the config name of the run that trained it (its plan's configName, or
    what annotating the run set), else the model name and that run's config hash."""
    _, version = resolve_model_reference(session, reference)
    run = session.get(Run, (version.lineage.get("producedBy") or {}).get("id", "")) if version.lineage else None
    if run is not None and run.config_name:
        return run.config_name
    name = reference.split("/", 1)[1].split(":")[0]
    return f"{name} {run.config_hash[:8]}" if run is not None else name
