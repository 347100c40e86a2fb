"""`GET /v1/status`: the deployment at a glance — jobs by kind and phase, device pools, serving endpoints and the
work queued for devices."""

from __future__ import annotations

from pydantic import Field

from optimize.schemas.catalog import Pool
from optimize.schemas.common import Answer


class PhaseCount(Answer):
    phase: str = Field(description="A phase of the kind's lifecycle")
    count: int = Field(description="Jobs in it")
    open: bool = Field(description="Whether jobs in it are still under way or waiting (false: ended)")


class KindCount(Answer):
    kind: str = Field(description="The job kind: run, analysis, evaluation, distillation or endpoint")
    open: int = Field(description="Its jobs not ended")
    total: int = Field(description="All its jobs")
    phases: list[PhaseCount] = Field(description="Each phase holding jobs: the open ones first, each group in "
                                                 "lifecycle order")


class ServingEndpoint(Answer):
    endpoint_id: str = Field(description="The endpoint's id")
    project: str = Field(description="The project it serves for")
    phase: str = Field(description="STARTING or READY")
    models: list[str] = Field(description="What it serves: the base model, then each adapter attached")
    in_flight: int | None = Field(description="Requests decoding in its batch, as its worker last reported; null "
                                              "before a report")
    queued: int | None = Field(description="Requests waiting for a row of its batch, as its worker last reported; "
                                           "null before a report")


class QueuedJob(Answer):
    kind: str = Field(description="The job kind")
    job_id: str = Field(description="The job's id")
    project: str | None = Field(description="Its project (null for a kind that has none)")
    device_profile: str = Field(description="The device profile it needs")
    devices: int = Field(description="How many devices of it")
    since: str = Field(description="When it was created (ISO 8601, UTC)")
    waiting_for: str | None = Field(description="What it waits for, in words")


class Queue(Answer):
    total: int = Field(description="Jobs waiting for devices")
    jobs: list[QueuedJob] = Field(description="The oldest of them first (at most 10)")


class Status(Answer):
    """The deployment at a glance, as the caller's token sees it (a token limited to projects sees only their jobs,
    endpoints and queued work; the pools are the deployment's)."""

    jobs: list[KindCount] = Field(description="Each job kind, in the server's order, with its jobs by phase")
    devices: list[Pool] = Field(description="Device pools: free, granted, declared and queued devices (as "
                                            "`training capacity` shows them)")
    endpoints: list[ServingEndpoint] = Field(description="Endpoints STARTING or READY, newest first")
    queue: Queue = Field(description="Work waiting for devices")
