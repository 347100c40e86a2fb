"""Snapshots as users handle them: read one, register its weights as a model version (`training snapshots
register`, or `registry models register NS/NAME --snapshot S` with an alias), pin its kinds against retention
(`training.server.retention`)."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select

from optimize.core.access import visible_projects
from optimize.core.errors import Invalid, Refused
from optimize.deployment import Deployment
from optimize.projects.service import open_project
from optimize.registry import aliases, artifact_views
from optimize.registry.models import resolve_model_reference
from optimize.registry.nouns import MODELS
from optimize.schemas import registry as registry_answers
from optimize.schemas import runs as answers
from optimize.schemas.resolved import resolved_config
from optimize.store.db import find_by_id_prefix
from optimize.store.events import record
from optimize.store.tables import Run, Snapshot
from optimize.training.adapters import adapted_modules, weights_digest
from optimize.training.server.completion import register_adapter
from optimize.training.server.retention import KINDS, live_kinds, sweep
from optimize.training.server.views import snapshot_view


def find_snapshot(session, snapshot_id: str) -> Snapshot:
    visible = visible_projects(Run.project)
    return find_by_id_prefix(session, Snapshot, snapshot_id, "snapshot",
                             "list a run's snapshots with: akka training runs snapshots RUN",
                             None if visible is None else Snapshot.run_id.in_(select(Run.id).where(visible)))


def get_snapshot(deployment: Deployment, snapshot_id: str) -> answers.SnapshotDetail:
    with deployment.store.transaction() as session:
        snapshot = find_snapshot(session, snapshot_id)
        run = session.get(Run, snapshot.run_id)
        return snapshot_view(snapshot).extended(answers.SnapshotDetail, project=run.project, model_name=run.model_name)


def register(deployment: Deployment, snapshot_id: str, name: str | None = None) -> answers.RegisteredSnapshot:
    """Register the snapshot's weights as a version of its project's model (the same weights: the same version)."""
    with deployment.store.transaction() as session:
        return _register(deployment, session, snapshot_id, name)


def register_in_registry(deployment: Deployment, namespace: str, name: str, snapshot_id: str, alias: str | None
                         ) -> registry_answers.ModelVersionDetail:
    """`registry models register NS/NAME --snapshot S`: the snapshot's weights as a version of NS/NAME, NS being
    the project of the run that saved it; `alias` is pointed at the version."""
    with deployment.store.transaction() as session:
        snapshot = find_snapshot(session, snapshot_id)
        project = session.get(Run, snapshot.run_id).project
        if namespace.lower() != project:
            raise Refused(f"snapshot {snapshot.id[:12]} was saved by a run of project {project}; its weights register "
                          f"under {project}/NAME, not {namespace}/{name}",
                          hint=f"register it as {project}/{name.lower()}")
        registered = _register(deployment, session, snapshot.id, name.lower())
        model, version = resolve_model_reference(session, registered.model)
        if alias:
            aliases.move_alias(session, MODELS, model, alias, version)
        return artifact_views.detail(session, MODELS, model, version)


def registered_model(deployment: Deployment, session, snapshot_id: str) -> str:
    """The snapshot's weights as a version of its run's model, registered in the caller's transaction if they were
    not (a comparison's source): its reference NS/NAME:vN."""
    return _register(deployment, session, snapshot_id, None).model


def _register(deployment: Deployment, session, snapshot_id: str, name: str | None) -> answers.RegisteredSnapshot:
    snapshot = find_snapshot(session, snapshot_id)
    kinds = live_kinds(snapshot)
    short = snapshot.id[:12]
    if "weights" not in kinds:
        swept = "weights" in (snapshot.swept or [])
        raise Refused(f"snapshot {short} " + ("had its weights swept by retention" if swept
                                              else "holds only training state, no adapter weights")
                      + "; it cannot be registered",
                      hint="register a snapshot that holds weights (see: akka training runs snapshots RUN)")
    run = session.get(Run, snapshot.run_id)
    open_project(session, run.project)  # an archived project takes no new candidates
    files = _weights_files(deployment, snapshot)
    if resolved_config(run.resolved["config"]).model.trains == "full":  # every weight, in one file or its shards
        tensors = [path for file, path in sorted(files.items()) if file.endswith(".safetensors")]
        if not tensors or "config.json" not in files:
            raise Invalid(f"snapshot {short}'s weights lack the model's safetensors files or its config.json")
        modules, digest = [], weights_digest(*tensors)
    elif "adapter_model.safetensors" not in files or "adapter_config.json" not in files:
        raise Invalid(f"snapshot {short}'s weights lack adapter_model.safetensors or adapter_config.json")
    else:
        modules = adapted_modules(files["adapter_config.json"])
        digest = weights_digest(files["adapter_model.safetensors"])
    reference = register_adapter(deployment, session, run, snapshot, modules, digest, name)
    record(session, f"run:{run.id}", "snapshot-registered", snapshotId=snapshot.id, model=reference)
    return snapshot_view(snapshot).extended(answers.RegisteredSnapshot, model=reference)


def _weights_files(deployment: Deployment, snapshot: Snapshot) -> dict[str, Any]:
    weights = next(a for a in snapshot.artifacts if a["kind"] == "weights")
    hint = "register a snapshot of the run that still holds its weights (akka training snapshots register)"
    digest = weights["manifestDigest"].removeprefix("sha256:")
    manifest = json.loads(deployment.blobs.held_path(
        digest, f"the weights manifest sha256:{digest} of snapshot {snapshot.id[:12]}", hint=hint).read_bytes())
    return {item["path"]: deployment.blobs.held_path(
        item["sha256"], f"{item['path']} (sha256:{item['sha256']}) of snapshot {snapshot.id[:12]}", hint=hint)
        for item in manifest["files"]}


def pin(deployment: Deployment, snapshot_id: str, kinds: list[str] | None, pinned: bool) -> answers.Snapshot:
    """Pin (or unpin) kinds of a snapshot, both it holds by default; all or nothing, and idempotent."""
    with deployment.store.transaction() as session:
        snapshot = find_snapshot(session, snapshot_id)
        held = [a["kind"] for a in snapshot.artifacts]
        asked = list(dict.fromkeys(kinds)) if kinds else held
        for kind in asked:
            if kind not in KINDS:
                raise Invalid(f"kind {kind!r} is not one of {', '.join(KINDS)}")
            if kind not in held:
                raise Refused(f"snapshot {snapshot.id[:12]} holds no {kind}", hint=f"its kinds: {', '.join(held)}")
        swept = [kind for kind in asked if kind in (snapshot.swept or [])]
        if pinned and swept:
            raise Refused(f"snapshot {snapshot.id[:12]}'s {', '.join(swept)} "
                          f"{'was' if len(swept) == 1 else 'were'} swept by retention and cannot be pinned",
                          hint="pin a kind the snapshot still holds")
        now = set(snapshot.pinned or [])
        snapshot.pinned = sorted(now | set(asked)) if pinned else sorted(now - set(asked)) or None
        record(session, f"run:{snapshot.run_id}", "pinned" if pinned else "unpinned", snapshotId=snapshot.id,
               kinds=asked)
        if not pinned:
            sweep(session, session.get(Run, snapshot.run_id))
        return snapshot_view(snapshot)
