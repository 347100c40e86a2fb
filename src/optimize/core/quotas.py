"""Per-project quotas: how much one training project (and the registry namespace of the same name) may hold at once.

- `openRuns`: runs not yet ended (queued, running or paused) in the project;
- `queuedWork`: runs, evaluations and endpoints of the project waiting for devices;
- `uploadSessions`: open dataset upload sessions into the namespace;
- `storedBytes`: bytes of the namespace's dataset versions plus the bytes its open upload sessions announce.

Every project gets the deployment's defaults (OPTIMIZE_QUOTA_OPEN_RUNS, …_QUEUED_WORK, …_UPLOAD_SESSIONS,
…_STORED_BYTES); OPTIMIZE_PROJECT_QUOTAS (JSON, e.g. `{"demo": {"openRuns": 5}}`) sets some projects apart. A
request over a quota is answered 429, naming the quota and what holds it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields, replace
from typing import Any

from optimize.core.errors import Invalid

GIB = 1024 ** 3
NAMES = {"open_runs": "openRuns", "queued_work": "queuedWork", "upload_sessions": "uploadSessions",
         "stored_bytes": "storedBytes"}


@dataclass(frozen=True, slots=True)
class Quota:
    """One project's quotas."""

    open_runs: int = 100
    queued_work: int = 50
    upload_sessions: int = 100
    stored_bytes: int = 500 * GIB

    def to_json(self) -> dict[str, int]:
        return {NAMES[f.name]: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, slots=True)
class Quotas:
    """The deployment's default quota and the projects set apart from it."""

    default: Quota = field(default_factory=Quota)
    projects: dict[str, Quota] = field(default_factory=dict)

    def of(self, project: str) -> Quota:
        return self.projects.get(project.lower(), self.default)

    def to_json(self) -> dict[str, Any]:
        return {"default": self.default.to_json(), "projects": {k: v.to_json() for k, v in self.projects.items()}}


def quotas_from_env(environ: dict[str, str] | None = None) -> Quotas:
    env = os.environ if environ is None else environ
    base = Quota()
    default = Quota(**{name: _count(env, f"OPTIMIZE_QUOTA_{name.upper()}", getattr(base, name)) for name in NAMES})
    text = env.get("OPTIMIZE_PROJECT_QUOTAS", "").strip()
    if not text:
        return Quotas(default)
    try:
        document = json.loads(text)
    except ValueError as error:
        raise Invalid(f"OPTIMIZE_PROJECT_QUOTAS is not JSON: {error}",
                      hint='e.g. OPTIMIZE_PROJECT_QUOTAS=\'{"demo": {"openRuns": 5}}\'') from None
    if not isinstance(document, dict):
        raise Invalid("OPTIMIZE_PROJECT_QUOTAS must map project names to quotas")
    by_key = {v: k for k, v in NAMES.items()}
    projects = {}
    for project, values in document.items():
        unknown = sorted(set(values) - set(by_key)) if isinstance(values, dict) else ["(not an object)"]
        if unknown:
            raise Invalid(f"OPTIMIZE_PROJECT_QUOTAS[{project!r}]: {', '.join(unknown)} is not a quota",
                          hint="quotas: " + ", ".join(NAMES.values()))
        projects[str(project).lower()] = replace(default, **{by_key[k]: _whole(v, f"{project}.{k}")
                                                             for k, v in values.items()})
    return Quotas(default, projects)


def _count(env, variable: str, fallback: int) -> int:
    text = env.get(variable, "").strip()
    return fallback if not text else _whole(text, variable)


def _whole(value: Any, what: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = -1
    if number < 0 or isinstance(value, bool):
        raise Invalid(f"{what} must be a whole number of at least 0, not {value!r}")
    return number
