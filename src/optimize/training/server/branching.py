"""Branches: a child run started from a parent's snapshot, with the parent's resolved settings and an overrides
document; `continue` (a trainingState branch with a step budget) and sweeps (one branch per grid point) are
spellings of the same thing. The parent is never changed. The child's plan is the parent's typed resolved config
(its datasets frozen at the versions it trained on) written as a plan, the overrides over it: overrides are written
in the plan's words, and the child is admitted as any plan is, by every rule and in the same words.

The restore mode is decided here. `trainingState` keeps the snapshot's optimizer state, random-number
generators and data position (and replaces the schedule with one spanning the child's updates at its learning
rate); it is accepted only for the same method and data, where the overrides touch nothing but the learning rate
and the validation frequency, from a snapshot that still holds its training state. `weights` starts the child's
optimizer fresh on the snapshot's adapter. `auto` (the default) takes trainingState wherever it is accepted and
weights otherwise, and says why.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from sqlalchemy import select

from optimize.core.documents import leaves
from optimize.core.errors import Invalid, NotFound, Refused
from optimize.deployment import Deployment
from optimize.schemas import runs as answers
from optimize.schemas.plans import METHODS
from optimize.schemas.resolved import resolved_plan
from optimize.schemas.runs import SweepGrid
from optimize.store.tables import Run, Snapshot
from optimize.training.methods import METHODS as METHODS_BY_NAME
from optimize.training.methods import declared
from optimize.training.server.retention import live_kinds
from optimize.training.server.runs import dry_run, find_run, submit
from optimize.training.server.snapshots import find_snapshot

RESTORE_MODES = ("auto", "weights", "trainingState")
CONTINUATION_PATHS = {"hyperparams.optimizer.learningRate", "hyperparams.training.validationFrequencySteps"}
STEP_PATHS = {"hyperparams.training.maxSteps", "hyperparams.training.epochs"}


def merged(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def source_snapshot(session, parent: Run, snapshot_id: str | None, need_state: bool) -> Snapshot:
    """The snapshot named, else the parent's newest one holding what the branch needs."""
    if snapshot_id:
        snapshot = find_snapshot(session, snapshot_id)
        if snapshot.run_id != parent.id:
            raise Invalid(f"snapshot {snapshot.id[:12]} belongs to run {snapshot.run_id[:12]}, not to {parent.id[:12]}")
        return snapshot
    found = session.scalars(select(Snapshot).where(Snapshot.run_id == parent.id)
                            .order_by(Snapshot.step.desc(), Snapshot.attempt.desc())).all()
    wanted = "trainingState" if need_state else "weights"
    snapshot = next((s for s in found if wanted in live_kinds(s)), None)
    if snapshot is None:
        raise Refused(f"run {parent.id[:12]} has no snapshot holding {wanted} to branch from",
                      hint=f"list its snapshots with: akka training runs snapshots {parent.id[:12]}")
    return snapshot


def choose_restore(requested: str, snapshot: Snapshot, parent: Run, overrides: dict[str, Any]) -> tuple[str, str]:
    """(mode, why) for a branch; refuses a mode that cannot be honoured, naming the reason."""
    if requested not in RESTORE_MODES:
        raise Invalid(f"restore mode {requested!r} is not one of {', '.join(RESTORE_MODES)}")
    kinds = live_kinds(snapshot)
    changed = sorted(set(leaves(overrides)) - STEP_PATHS)
    blockers = []
    if "trainingState" not in kinds:
        blockers.append(f"snapshot {snapshot.id[:12]} holds no training state (weights only)")
    method = overrides.get("method")
    if method and method != parent.method:
        blockers.append(f"the branch trains {method}, not its parent's {parent.method}")
    others = [path for path in changed if path not in CONTINUATION_PATHS]
    if others:
        blockers.append(f"the overrides change {', '.join(others)}; a trainingState branch accepts only the learning "
                        "rate and the validation frequency")
    if requested == "trainingState" and blockers:
        raise Refused(f"a trainingState branch cannot start here: {'; '.join(blockers)}",
                      hint="branch with --restore weights, or change only what a continuation accepts")
    if requested == "weights":
        if "weights" not in kinds:
            raise Refused(f"snapshot {snapshot.id[:12]} holds no adapter weights to branch from")
        return "weights", "asked for: a fresh optimizer on the snapshot's adapter"
    if not blockers:
        why = ("asked for" if requested == "trainingState" else "auto") + (
            ": the snapshot holds its training state and the branch keeps its method, data and settings"
            + (f" but {', '.join(changed)}" if changed else ""))
        return "trainingState", why
    if "weights" not in kinds:
        raise Refused(f"snapshot {snapshot.id[:12]} holds no adapter weights to branch from")
    return "weights", "auto: " + "; ".join(blockers)


def _refuse_lora_changes(overrides: dict[str, Any], snapshot: Snapshot) -> None:
    lora = sorted(path for path in leaves(overrides) if path.startswith(("hyperparams.lora.", "rlHyperparams.lora.")))
    if lora:
        raise Refused(f"the overrides change {', '.join(lora)}, but a branch trains the adapter of snapshot "
                      f"{snapshot.id[:12]} and keeps its LoRA settings",
                      hint="remove the hyperparams.lora overrides, or start a new run from the base model")


def child_document(parent: Run, overrides: dict[str, Any], max_steps: int | None, epochs: int | None
                   ) -> dict[str, Any]:
    """The parent's resolved settings (its datasets at the versions it trained on) as a plan states them, the
    overrides over them."""
    resolved = resolved_plan(parent.resolved)
    frozen = {"dataset": parent.dataset_reference}
    if parent.validation_reference:
        frozen["validation"] = resolved.config.validation.model_copy(update={"dataset": parent.validation_reference})
    config = merged(resolved.config.model_copy(update=frozen).as_plan(), overrides)
    stated = (overrides.get("model") or {}).get("adapter") if isinstance(overrides.get("model"), dict) else None
    if stated and stated != resolved.config.model.trains:
        raise Refused(f"overrides.model.adapter {stated} would train other weights than run {parent.id[:12]}'s save "
                      f"holds ({resolved.config.model.trains})", hint="remove overrides.model.adapter")
    if overrides.get("method") and overrides["method"] != parent.method:
        _switch_method_sections(config, parent.method)
        if "packing" not in overrides:  # how the parent laid out its rows: the child's method resolves its own
            config.pop("packing", None)
    if max_steps is not None:
        _training_section(config).update(maxSteps=max_steps)
    if epochs is not None:
        _training_section(config).update(epochs=epochs, maxSteps=None)
    return {"kind": "run", "project": parent.project, "baseModel": parent.base_entry_id,
            "modelName": parent.model_name, "description": f"branch of run {parent.id[:12]}",
            # the parent's execution.pauseAtStep was the parent's pause: a child pauses where its own plan says
            "config": config, "execution": resolved.execution.model_dump(by_alias=True, mode="json",
                                                                         exclude={"pause_at_step"})}


def _training_section(config: dict[str, Any]) -> dict[str, Any]:
    """The training block a branch's length is written into: made where the child leaves its method's settings to
    the defaults (a supervised run branched into grpo with no rlHyperparams), refused by its path where the
    overrides put something other than a mapping there."""
    section = declared(config["method"]).trained_by
    if config.get(section) is None:
        config[section] = {}
    if not isinstance(config[section], dict):
        raise Invalid(f"overrides.{section} must be a mapping, not {json.dumps(config[section])[:40]}",
                      hint=f"give {section} as a mapping of settings, e.g. {{training: {{batchSize: 4}}}}")
    if config[section].get("training") is None:
        config[section]["training"] = {}
    if not isinstance(config[section]["training"], dict):
        raise Invalid(f"overrides.{section}.training must be a mapping, not "
                      f"{json.dumps(config[section]['training'])[:40]}", hint="e.g. {batchSize: 4}")
    return config[section]["training"]


# the sections a method owns beside the settings it trains by (dpo's preference)
OWN_SECTIONS = {method.section for method in METHODS_BY_NAME.values()
                if method.section not in (None, method.trained_by)}


def _switch_method_sections(config: dict[str, Any], parent_method: str) -> None:
    """A branch that trains another method (a supervised adapter trained on by grpo, through a weights branch)
    keeps the parent's training data and its adapter's LoRA settings (the adapter it trains on) and drops what only
    the parent's method reads: the child states its own (`rlHyperparams` and `reward` for a reinforcement run, which
    takes no validation dataset; `hyperparams` for a supervised or dpo one, from the defaults unless the overrides
    give them), and a section one method owns beside its training settings (dpo's `preference`) is kept only by
    that method."""
    child, parent = declared(config["method"]), declared(parent_method)
    if child.trained_by != parent.trained_by:
        trained = config.pop(parent.trained_by, None) or {}
        if isinstance(trained, dict) and trained.get("lora") is not None:
            # the child trains the snapshot's adapter: the LoRA settings it records are the ones that adapter has
            if not isinstance(config.get(child.trained_by), dict):
                config[child.trained_by] = {}
            config[child.trained_by]["lora"] = trained["lora"]
        if parent.rewarded and not child.rewarded:
            config.pop("reward", None)
        if not child.takes_validation:
            config.pop("validation", None)
    for section in OWN_SECTIONS - {child.section}:
        config.pop(section, None)


def _check_overrides(overrides: Any, max_steps: int | None, epochs: int | None) -> dict[str, Any]:
    if overrides is None:
        overrides = {}
    if not isinstance(overrides, dict):
        raise Invalid("the overrides must be one mapping: a partial config document")
    if "method" in overrides and overrides["method"] not in METHODS:
        raise Invalid(f"overrides.method must be one of {', '.join(METHODS)}, not "
                      f"{json.dumps(overrides['method'])[:40]}", hint="name the method the branch trains, e.g. grpo")
    if max_steps is not None and epochs is not None:
        raise Invalid("give the branch's length by --max-steps or --epochs, not both")
    stated = STEP_PATHS & set(leaves(overrides))
    if stated and (max_steps is not None or epochs is not None):
        raise Invalid(f"the overrides set {', '.join(sorted(stated))} and the command gives the length too; keep one")
    return overrides


def prepare(deployment: Deployment, parent_id: str, snapshot_id: str | None, restore: str, overrides: Any,
            max_steps: int | None = None, epochs: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The child's plan document and its branch record, every rule checked; nothing is stored."""
    overrides = _check_overrides(overrides, max_steps, epochs)
    with deployment.store.transaction() as session:
        parent = find_run(session, parent_id)
        snapshot = source_snapshot(session, parent, snapshot_id, need_state=restore == "trainingState")
        mode, why = choose_restore(restore or "auto", snapshot, parent, overrides)
        _refuse_lora_changes(overrides, snapshot)
        document = child_document(parent, overrides, max_steps, epochs)
        record = {"parentRunId": parent.id, "snapshotId": snapshot.id, "step": snapshot.step, "restore": mode,
                  "why": why, "requested": restore or "auto",
                  "artifacts": [a for a in snapshot.artifacts if a["kind"] in
                                (("weights", "trainingState") if mode == "trainingState" else ("weights",))]}
    return document, record


def branch(deployment: Deployment, parent_id: str, snapshot_id: str | None = None, restore: str = "auto",
           overrides: Any = None, max_steps: int | None = None, epochs: int | None = None,
           dry: bool = False) -> answers.Run | answers.BranchDryRun:
    document, record = prepare(deployment, parent_id, snapshot_id, restore, overrides, max_steps, epochs)
    if dry:
        return dry_run(deployment, document, starts_from=_registered_at(deployment, record["snapshotId"]),
                       branch=record).extended(answers.BranchDryRun, branch=record)
    run, _ = submit(deployment, document, branch=record)
    return run


def _registered_at(deployment: Deployment, snapshot_id: str) -> str | None:
    """The model version registered from a snapshot's weights (what a branch from it starts from), if any: the dry
    run reads the sampled answers of that model."""
    with deployment.store.transaction() as session:
        registered = session.get(Snapshot, snapshot_id).registered or []
    return registered[0] if registered else None


def continue_run(deployment: Deployment, parent_id: str, steps: int, snapshot_id: str | None = None,
                 overrides: Any = None, dry: bool = False) -> answers.Run | answers.BranchDryRun:
    """A trainingState branch of `steps` more updates (its schedule spans them at the child's learning rate)."""
    return branch(deployment, parent_id, snapshot_id, "trainingState", overrides, max_steps=steps, dry=dry)


def sweep(deployment: Deployment, parent_id: str, grid: SweepGrid, snapshot_id: str | None = None,
          restore: str = "auto", dry: bool = False) -> answers.Sweep | answers.SweepDryRun:
    """One branch per grid point (the grid as its request read it: `SweepGrid.read`); every point is checked (as a
    dry run) before any is submitted."""
    points = grid.points()
    checked = []
    for number, point in enumerate(points, 1):
        try:
            document, record = prepare(deployment, parent_id, snapshot_id, restore, point)
            dry_run(deployment, document, branch=record)
        except (Invalid, Refused, NotFound) as error:
            raise type(error)(f"sweep point {number} ({_describe(point)}): {error.message}", hint=error.hint) from None
        checked.append((point, document, record))
    if dry:
        return answers.SweepDryRun(dry_run=True, points=[answers.SweepPoint(overrides=p, restore=r["restore"],
                                                                            why=r["why"]) for p, _, r in checked])
    # each branch's grid point first, then the run as its submission answered it
    runs = [answers.SweepRun(overrides=p, **submit(deployment, d, branch=r)[0].given()) for p, d, r in checked]
    return answers.Sweep(runs=runs)


def _describe(point: dict[str, Any]) -> str:
    return ", ".join(f"{path}={value!r}" for path, value in leaves(point).items())


def children(deployment: Deployment, run_id: str, recursive: bool = False) -> answers.Branches:
    from optimize.training.server.views import run_view

    with deployment.store.transaction() as session:
        root = find_run(session, run_id)
        rows, frontier = [], [(root.id, 1)]
        while frontier:
            parent, depth = frontier.pop(0)
            found = session.scalars(select(Run).where(Run.parent_run_id == parent).order_by(Run.created_at)).all()
            for child in found:
                rows.append(run_view(child).extended(answers.BranchChild, depth=depth))
                if recursive:
                    frontier.append((child.id, depth + 1))
        return answers.Branches(run_id=root.id, runs=rows)


def ancestry(deployment: Deployment, run_id: str) -> answers.Ancestry:
    """The chain from the root run to this one, each hop with its source snapshot, step and step budget."""
    with deployment.store.transaction() as session:
        run = find_run(session, run_id)
        chain = []
        while run is not None:
            hop = answers.AncestryHop(run_id=run.id, phase=run.phase, method=run.method,
                                      steps=(run.progress or {}).get("totalSteps"))
            if run.branch and run.branch.get("source"):  # the root of its chain: a registered adapter's weights
                hop = hop.extended(source=run.branch["source"]["model"])
            elif run.branch:
                hop = hop.extended(snapshot_id=run.branch["snapshotId"], from_step=run.branch["step"],
                                   restore=run.branch["restore"])
            chain.append(hop)
            run = session.get(Run, run.parent_run_id) if run.parent_run_id else None
        return answers.Ancestry(run_id=chain[0].run_id, chain=list(reversed(chain)))


def fan(session, parent: Run, snapshot_id: str) -> list[Run]:
    """The parent's branches from one of its snapshots, oldest first: the runs a comparison of that snapshot's
    fan scores."""
    return [child for child in session.scalars(select(Run).where(Run.parent_run_id == parent.id)
                                               .order_by(Run.created_at))
            if (child.branch or {}).get("snapshotId") == snapshot_id]
