"""A train stage's mix: the dataset versions its `config.dataset` lists (registered ones, or `@STAGE` outputs)
registered together, their rows in the order listed, as one version of the stage's `mixedDataset`, which its run
then reads like any dataset.

So a run is always over one version, and that version says what it is made of: its lineage names the pipeline and
the stage and, in order, each version it mixes (reference, digest, rows). The same versions mixed again give the same
rows, hence the same version (the registry's content rule), so a stage started again — after a restart, or by
`resume` — trains on what it trained on before. The versions must hold rows of one kind (chat, or preference pairs).
"""

from __future__ import annotations

from typing import Any

from optimize.core.errors import Refused
from optimize.deployment import Deployment
from optimize.registry.datasets import examples_objects
from optimize.registry.produced import register_rows
from optimize.registry.rows import version_rows
from optimize.registry.uploads import Registry
from optimize.workloads.dataset_kinds import HOLDS
from optimize.workloads.datasets import DatasetPick, find_dataset


def mix_target(text: str, project: str) -> str:
    """NS/NAME of `mixedDataset`; a name without a namespace is the project's."""
    return text.strip() if "/" in text else f"{project}/{text.strip()}"


def mixable(session, part: str, project: str, index: int) -> tuple[DatasetPick, str]:
    """The version a listed dataset names and its kind; prepared token rows (Parquet files, no JSON rows) are
    refused."""
    version, kind = find_dataset(session, part, project, f"config.dataset[{index}]")
    if version.prepared is not None:
        raise Refused(f"config.dataset[{index}] {version.reference} holds prepared token rows, which a mix cannot "
                      "join with other rows", hint="mix chat or preference datasets; register prepared rows "
                                                   "together as one version instead")
    if version.images:
        raise Refused(f"config.dataset[{index}] {version.reference} holds rows with images ({version.images} "
                      "image(s)), which a mix cannot join with other rows", hint="train a dataset with images in a "
                                                                                 "stage of its own")
    return version, kind


def register_mix(deployment: Deployment, project: str, pipeline_id: str, stage: str, parts: list[str],
                 target: str) -> str:
    """Register the rows of `parts` (dataset references, in order) as one version of `target`; returns the
    version's reference (NS/NAME:vN). Refused when the parts hold rows of different kinds."""
    picked: list[tuple[DatasetPick, list[dict[str, Any]]]] = []
    with deployment.store.transaction() as session:
        kinds: dict[str, str] = {}
        for index, part in enumerate(parts):
            version, kind = mixable(session, part, project, index)
            kinds.setdefault(kind, version.reference)
            picked.append((version, examples_objects(session, version.digest)))
    if len(kinds) > 1:
        said = " and ".join(f"{HOLDS.get(kind, kind)} ({reference})" for kind, reference in kinds.items())
        raise Refused(f"config.dataset mixes {said}; a mix holds rows of one kind",
                      hint="list datasets of the kind the run's method trains on")
    rows = [row for version, objects in picked for _, row in version_rows(deployment.blobs, objects,
                                                                         version.reference)]
    lineage = {"producedBy": {"kind": "pipeline", "id": pipeline_id, "stage": stage},
               "mixedFrom": [{"reference": v.reference, "digest": v.digest, "rows": v.rows} for v, _ in picked]}
    registry = Registry(deployment.store, deployment.blobs, deployment.dataset_limits, deployment.quotas)
    return register_rows(registry, mix_target(target, project), rows, lineage).version.reference
