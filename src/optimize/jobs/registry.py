"""The job kinds this process runs, as the kernel knows them: by their declarations (`jobs.kinds.JobKind`) only.

The kernel names no kind. Whoever starts the process registers the kinds it serves — the server registers the
kinds of its API's table (`api.kinds`) before it recovers or schedules anything — and the scheduler, recovery,
the workers' routes, logs, waiting reasons and projects' counts of unfinished work read them from here, in the
order they were registered.
"""

from __future__ import annotations

from optimize.jobs.kinds import JobKind

KINDS: dict[str, JobKind] = {}  # name -> declaration, in the order registered


def register(*declared: JobKind) -> None:
    """Make these kinds known to the kernel. Registering a kind again is a no-op; another declaration under a name
    already registered is a mistake of the process' assembly, refused."""
    for kind in declared:
        known = KINDS.setdefault(kind.name, kind)
        if known is not kind:
            raise ValueError(f"job kind {kind.name!r} is already registered as {type(known).__qualname__}")


def kind(name: str) -> JobKind:
    """The declared `JobKind` of that name (KeyError for a name no kind is registered under)."""
    return KINDS[name]


def kinds() -> list[JobKind]:
    """Every registered kind, in the order registered."""
    return list(KINDS.values())
