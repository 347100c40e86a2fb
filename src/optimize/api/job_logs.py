"""`GET …/{id}/logs` for every job kind: one route builder, used by one line in each kind's router
(`add_log_route(router, "run")`), reading through the kernel (`optimize.jobs.logs`)."""

# no `from __future__ import annotations`: the route's annotations name this kind's path parameter, so they are
# built when the route is, not resolved later in the module's globals
from typing import Annotated

from fastapi import APIRouter, Path, Query

from optimize.api.deps import DeploymentDep
from optimize.jobs import logs
from optimize.schemas.logs import JobLog


def add_log_route(router: APIRouter, kind: str) -> None:
    """Add `GET {prefix}/{<kind>_id}/logs` to the kind's router."""
    id_name = f"{kind}_id"

    def read_log(
        deployment: DeploymentDep,
        job_id: Annotated[str, Path(alias=id_name, description=f"The {kind}'s id or an unambiguous prefix")],
        attempt: Annotated[int | None, Query(ge=1, description="The attempt whose log to read (default: the "
                                                               "newest with a log)")] = None,
        offset: Annotated[int, Query(ge=0, description="The byte offset to read from (a chunk's nextOffset)")] = 0,
    ) -> JobLog:
        return logs.read_log(deployment, kind, job_id, attempt, offset)

    read_log.__name__ = f"read_{kind}_log"
    router.add_api_route(
        f"/{{{id_name}}}/logs", read_log, methods=["GET"], response_model=JobLog, name=f"read_{kind}_log",
        summary=f"Read the worker's log of a {kind}",
        description=f"What the {kind}'s worker printed in one attempt (default: the newest), a chunk of at most "
                    f"{logs.CHUNK_BYTES // (1 << 20)} MiB from byte `offset`; page or follow it with `nextOffset` "
                    "until the job is settled and `nextOffset` reaches `size`. An unknown id, or an attempt without "
                    "a log, is refused (404) naming the attempts that have one.")
