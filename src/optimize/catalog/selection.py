"""Selecting a base model: the weights this deployment will train and serve, at a recorded commit.

A model is obtained in one of three ways, all ending as a folder in the data dir's model cache:
- a stand-in is built here (in a child process, so the server never imports torch);
- `--from DIR` imports a local snapshot (safetensors weights, a tokenizer and a chat template);
- otherwise it is fetched from the hub (catalog/hub.py): at the catalog's pinned commit, or, where the catalog pins
  none, at the commit `--revision` (default: main) names now — resolved once, recorded, and said in the answer.
  An offline server refuses up front instead of trying at job time.
Whatever the source, the files must be the model the entry names: their config's architecture, hidden size,
layers, heads and vocabulary are checked against the entry (catalog/facts.py), and the parameter count shown for
a selected model is counted in its files, not copied from the catalog.
The same transaction that records the selection registers the model as a BASE version under its lowercased
repository (`Qwen/Qwen3-0.6B` → `qwen/qwen3-0.6b:v1`); selecting the same commit again registers nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from optimize.catalog import hub
from optimize.catalog.catalog import Catalog
from optimize.catalog.facts import check_shape, read_folder_facts
from optimize.catalog.schema import Entry
from optimize.catalog.standins import files_digest
from optimize.core.clock import utcnow
from optimize.core.errors import Invalid, NotFound, Refused
from optimize.core.ids import new_id
from optimize.core.settings import import_roots
from optimize.registry.models import register_base_model
from optimize.store.db import Store
from optimize.store.tables import BaseModelSelection

REQUIRED_FILES = ("config.json",)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model")


def cache_root(data_dir: Path) -> Path:
    return data_dir / "models"


def select(store: Store, catalog: Catalog, data_dir: Path, query: str, from_dir: str | None,
           revision: str | None = None) -> BaseModelSelection:
    entry = catalog.find(query)
    if revision is not None and (from_dir or entry.stand_in is not None):
        what = "an imported folder" if from_dir else f"the stand-in {entry.id}, which is built here"
        raise Invalid(f"--revision names a hub revision; {what} has none", hint="leave out --revision")
    staging = cache_root(data_dir) / f".staging-{new_id()}"
    staging.parent.mkdir(parents=True, exist_ok=True)
    commit = None
    try:
        if from_dir:
            _import_snapshot(Path(from_dir), staging)
            source, what = "import", f"the folder {from_dir}"
        elif entry.stand_in is not None:
            _build_stand_in(entry, staging)
            source, what = "stand-in", f"the stand-in built for {entry.id}"
        else:
            commit = _fetch_from_hub(entry, revision, staging)
            source, what = "hub", f"{entry.repository} at {commit[:12]}"
        facts = read_folder_facts(staging, what)
        check_shape(entry.id, entry.architecture, facts, what)
        digest = files_digest(staging)
        target = cache_root(data_dir) / digest
        if target.exists():
            shutil.rmtree(staging)
        else:
            staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if commit is None:  # a stand-in's or unpinned import's commit is the digest of its files
        commit = digest if source == "stand-in" or entry.commit is None else entry.commit
    with store.transaction() as session:
        selection = session.get(BaseModelSelection, entry.id)
        if selection is None:
            selection = BaseModelSelection(entry_id=entry.id)
            session.add(selection)
        selection.repository, selection.commit, selection.content_digest = entry.repository, commit, digest
        selection.source, selection.path, selection.selected_at = source, str(target), utcnow()
        selection.revision, selection.parameters = revision, facts.parameters
        register_base_model(session, entry.repository, commit, entry.id)
    return selection


def _import_snapshot(source: Path, staging: Path) -> None:
    _check_import_allowed(source)
    if not source.is_dir():
        raise Invalid(f"{source} is not a directory", hint="pass --from a local snapshot folder of the model")
    missing = [name for name in REQUIRED_FILES if not (source / name).is_file()]
    if not any((source / name).is_file() for name in TOKENIZER_FILES):
        missing.append("tokenizer.json")
    if not list(source.glob("*.safetensors")):
        pickled = [p.name for p in source.glob("*.bin")] + [p.name for p in source.glob("*.pt")]
        hint = f"convert {', '.join(pickled)} to safetensors" if pickled else "add the weights as safetensors"
        raise Invalid(f"{source} holds no safetensors weights; pickled weights are not loaded", hint=hint)
    if missing:
        raise Invalid(f"{source} is not a model snapshot: it lacks {', '.join(missing)}")
    shutil.copytree(source, staging, symlinks=False, ignore=shutil.ignore_patterns(".git", "*.bin", "*.pt"))


def _check_import_allowed(source: Path) -> None:
    """Imports read the server's own disk, so only under the roots an operator named, and only plain files and
    folders: a symlink or a special file could reach (or block on) anything else the server can read."""
    roots = import_roots()
    if not roots:
        raise Refused("importing a model from a folder is off on this server: no import roots are configured",
                      hint="an operator names the folders imports may come from in OPTIMIZE_IMPORT_ROOTS "
                           "(e.g. /srv/models) and restarts the server")
    resolved = source.resolve()
    if not any(resolved == root or resolved.is_relative_to(root) for root in roots):
        raise Refused(f"{source} is not under an import root of this server",
                      hint=f"import roots: {', '.join(str(r) for r in roots)}; copy the model under one of them")
    if source.is_symlink():
        raise Refused(f"{source} is a symlink; imports read plain folders only", hint=f"import {resolved} itself")
    for path in sorted(resolved.rglob("*")):
        if path.is_symlink():
            raise Refused(f"{path.relative_to(resolved)} in {source} is a symlink; imports copy plain files only",
                          hint="replace it with the file it points to")
        if not path.is_dir() and not path.is_file():
            raise Refused(f"{path.relative_to(resolved)} in {source} is not a regular file (a device, pipe or "
                          "socket); imports copy plain files only", hint="remove it from the folder")


def _build_stand_in(entry: Entry, staging: Path) -> None:
    command = [sys.executable, "-m", "optimize.catalog.standins", entry.stand_in.family, entry.stand_in.size,
               str(staging)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise Refused(f"building the stand-in {entry.id} failed: {reason}",
                      hint="install the training extra: pip install -e '.[train]'")


def _fetch_from_hub(entry: Entry, revision: str | None, staging: Path) -> str:
    """Download the entry's files into `staging` and return the commit they are at."""
    offline_hint = f"select it from a local snapshot: akka training base-models select {entry.id} --from DIR"
    hub.require_online(entry.repository, offline_hint)
    if entry.commit is not None and revision is None:
        commit = entry.commit  # pinned: no need to ask the hub what it names
    else:
        commit = hub.resolve(entry.repository, revision or "main", offline_hint)
        if entry.commit is not None and commit != entry.commit:
            raise Refused(f"the catalog pins {entry.repository} to {entry.commit}; --revision {revision} is "
                          f"{commit}", hint="leave out --revision to select the pinned commit")
    hub.download(entry.repository, commit, staging, offline_hint, entry_id=entry.id)
    return commit


def selection_for(store: Store, entry_id: str) -> BaseModelSelection | None:
    with store.transaction() as session:
        return session.get(BaseModelSelection, entry_id)


def job_model(store: Store, entry: Entry, commit: str) -> dict[str, str | None]:
    """What a job's worker needs of its base model: where this host caches it and how its rows render."""
    chosen = selection_for(store, entry.id)
    return {"id": entry.id, "repository": entry.repository, "family": entry.family, "commit": commit,
            "path": chosen.path if chosen else None, "chatTemplate": entry.chat_template}


def model_dir(store: Store, catalog: Catalog, query: str) -> Path:
    """The cached folder a job loads; a model never selected is refused, never downloaded at job time."""
    entry = catalog.find(query)
    selection = selection_for(store, entry.id)
    if selection is None or not Path(selection.path).is_dir():
        raise NotFound(f"base model {entry.id} is not selected on this deployment",
                       hint=f"select it first: akka training base-models select {entry.id}")
    return Path(selection.path)
