"""Worker logs: `GET /v1/training/{runs,evaluations,endpoints,datasets/analyses}/{id}/logs`."""

from __future__ import annotations

from pydantic import Field

from optimize.schemas.common import Answer


class JobLog(Answer):
    """A chunk of what one attempt's worker printed (stdout and stderr), from a byte offset. Ask again from
    `nextOffset` for what follows: while it is below `size` there is more now; once the job is `settled` and
    `nextOffset` reaches `size`, the log is complete."""

    kind: str = Field(description="The job's kind: run, analysis, evaluation or endpoint")
    id: str = Field(description="The job's full id")
    phase: str = Field(description="The job's phase when the chunk was read")
    attempt: int | None = Field(description="The attempt whose log this is (default: the newest); null while no "
                                            "attempt has a log yet")
    attempts: list[int] = Field(description="The job's attempts that have a log, oldest first")
    text: str = Field(description="The chunk, as the worker wrote it (UTF-8; at most 1 MiB, ending after a whole "
                                  "line where it can)")
    offset: int = Field(description="The byte offset of the log the chunk starts at")
    next_offset: int = Field(description="The byte offset to ask for next")
    size: int = Field(description="The attempt's log in bytes when it was read")
    settled: bool = Field(description="The job is settled (ended, or paused) and its worker has exited: its log "
                                      "grows no more")
