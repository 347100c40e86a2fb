"""The applied catalog: loaded once at server start from YAML, looked up by id, repository or prefix."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from optimize.catalog.schema import CatalogFile, Entry, entry_id_problems
from optimize.core.environment import setting
from optimize.core.errors import Invalid, NotFound, Refused
from optimize.jobs.devices import DeviceProfile

SHIPPED = Path(__file__).resolve().parents[3] / "catalogs" / "default.yaml"


def shipped_catalog_path() -> Path:
    """The catalog shipped with Optimize (`catalogs/default.yaml`), unless OPTIMIZE_CATALOG names another."""
    return setting("OPTIMIZE_CATALOG") or SHIPPED


def check_replica_profile(entry: Entry, profile: DeviceProfile, profiles: list[DeviceProfile], work: str) -> None:
    """A model allowed for serving only runs on one GPU a replica: an endpoint, evaluation or distillation of it on
    another kind of device is refused, naming the GPU profiles there are."""
    if entry.serving_only and profile.kind != "gpu":
        gpus = ", ".join(p.name for p in profiles if p.kind == "gpu") or "this deployment has none"
        article = "an" if work[:1] in "aeiou" else "a"
        raise Refused(f"{entry.id} is allowed for serving only and runs on one GPU a replica; {article} {work} of "
                      f"it cannot use profile {profile.name!r} ({profile.kind})", hint=f"pass a GPU profile: {gpus}")


def replica_profile(entry: Entry, profiles: list[DeviceProfile], asked: Any, work: str) -> str:
    """The device profile a replica of `entry` answers on (an endpoint, a distillation): the one asked for, else
    the first the catalog serves the model on, else the CPU slot; checked by `check_replica_profile`."""
    named = {p.name: p for p in profiles}
    if asked is not None and asked not in named:
        raise Refused(f"deviceProfile {asked!r} is not a device profile of this deployment",
                      hint="profiles here: " + ", ".join(named))
    if asked is None:
        asked = next((name for name in entry.served_on if name in named), "cpu")
    check_replica_profile(entry, named[asked], profiles, work)
    return asked


@dataclass(frozen=True)
class Catalog:
    path: Path
    document: CatalogFile
    # entries `base-models add` put in this deployment's store, applied after the file's (the file wins a clash)
    added: list[Entry] = field(default_factory=list)

    @property
    def entries(self) -> list[Entry]:
        return [*self.document.models, *self.added]

    def add(self, entry: Entry) -> None:
        """Apply an added entry (kept in the store, so a restarted server applies it again)."""
        taken = {e.id for e in self.entries} | {e.repository.lower() for e in self.entries}
        if entry.id not in taken and entry.repository.lower() not in taken:
            self.added.append(entry)

    @property
    def strict_envelopes(self) -> bool:
        return self.document.trainer.base_model_catalog.strict_envelopes

    def find(self, query: str) -> Entry:
        """An entry by id, repository (any case) or an unambiguous prefix of either."""
        wanted = query.strip().lower()
        for entry in self.entries:
            if wanted in (entry.id.lower(), entry.repository.lower()):
                return entry
        matches = [e for e in self.entries if any(
            name.startswith(wanted) for name in (e.id.lower(), e.repository.lower(), e.id.lower().split("/")[-1]))]
        if len(matches) == 1 and wanted:
            return matches[0]
        if len(matches) > 1:
            names = ", ".join(e.id for e in matches[:8])
            raise Invalid(f"{query!r} matches {len(matches)} base models ({names})", hint="give more of the name")
        hint = "list the catalog with: akka training base-models list"
        if wanted.count("/") == 1:  # a hub repository the catalog lacks: an administrator can add it
            hint += f"; an administrator adds a hub model with: akka training base-models add {query.strip()}"
        raise NotFound(f"no base model {query!r} in the catalog", hint=hint)


def load_catalog(path: Path | None = None) -> Catalog:
    """Read and check a catalog file; every problem is refused naming its field."""
    source = path or shipped_catalog_path()
    try:
        raw: Any = yaml.safe_load(source.read_text(encoding="utf-8"))
    except OSError as error:
        raise Invalid(f"cannot read the catalog {source}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise Invalid(f"the catalog {source} is not valid YAML: {error}") from None
    try:
        document = CatalogFile.model_validate(raw)
    except ValidationError as error:
        issues = "; ".join(
            f"{'.'.join(str(p) for p in item['loc'])}: {item['msg']}" for item in error.errors()[:10])
        raise Invalid(f"the catalog {source} is not valid: {issues}") from None
    problems = entry_id_problems(document.models)
    if problems:
        raise Invalid(f"the catalog {source} is not valid: {'; '.join(problems)}")
    return Catalog(source, document)
