"""Pipelines as a job kind of the kernel, one with no worker: the scheduler moves a new pipeline to RUNNING, and its
server step (`jobs.server_steps`) moves it on at every tick — starting each stage's job once the stages before it
completed, reading their outputs, applying gates — until it ends. The stages' jobs claim devices; it holds none."""

from __future__ import annotations

from optimize.jobs.kinds import JobKind, Recovery
from optimize.jobs.server_steps import ServerStep
from optimize.pipelines import service
from optimize.pipelines.phases import PIPELINE
from optimize.schemas.phases import PipelinePhase


class PipelineKind(JobKind):
    name = "pipeline"
    project_work = True
    lifecycle = PIPELINE
    waiting = PipelinePhase.PENDING
    granted = PipelinePhase.RUNNING
    pool = None
    worker = False
    on_restart = Recovery.FAIL  # never asked: a pipeline holds no lease
    server_step = ServerStep(PipelinePhase.RUNNING, service.advance, "advance")


KIND = PipelineKind()
