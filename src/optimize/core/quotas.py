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

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from optimize.core.environment import declared, setting
from optimize.core.errors import Invalid

GIB = 1024 ** 3
NAMES = {"open_runs": "openRuns", "queued_work": "queuedWork", "upload_sessions": "uploadSessions",
         "stored_bytes": "storedBytes"}


@dataclass(frozen=True, slots=True)
class Quota:
    """One project's quotas."""

    open_runs: int = declared("OPTIMIZE_QUOTA_OPEN_RUNS").default_value
    queued_work: int = declared("OPTIMIZE_QUOTA_QUEUED_WORK").default_value
    upload_sessions: int = declared("OPTIMIZE_QUOTA_UPLOAD_SESSIONS").default_value
    stored_bytes: int = declared("OPTIMIZE_QUOTA_STORED_BYTES").default_value

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


def quotas_from_env(environ: Mapping[str, str] | None = None) -> Quotas:
    """The quotas the OPTIMIZE_QUOTA_* variables and OPTIMIZE_PROJECT_QUOTAS set (in `environ`, else this
    process's environment); a malformed one is refused naming it."""
    default = Quota(**{name: setting(f"OPTIMIZE_QUOTA_{name.upper()}", environ) for name in NAMES})
    document = setting("OPTIMIZE_PROJECT_QUOTAS", environ)
    if document is None:
        return Quotas(default)
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


def _whole(value: Any, what: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = -1
    if number < 0 or isinstance(value, bool):
        raise Invalid(f"{what} must be a whole number of at least 0, not {value!r}")
    return number
