"""The phases of the jobs one kind of work reads of another's, as the answers carry them: an analysis's (a run's
length check and estimate read it), an evaluation's (a run's reward check and the scores read the completed ones) and
a run's (the throughput of completed runs). Each kind's lifecycle table is built on its enum here
(`analysis.states`, `evaluation.phases`, `training.server.phases`); code compares phases to these members, never to
strings."""

from __future__ import annotations

from enum import StrEnum


class AnalysisPhase(StrEnum):
    PENDING = "pending"  # accepted; waiting for the scheduler to start its worker
    RUNNING = "running"  # the worker is measuring rows
    DONE = "done"  # the report is kept
    FAILED = "failed"  # ended with a reason; started again on request unless it refused the dataset


class EvaluationPhase(StrEnum):
    QUEUED = "QUEUED"  # waiting for a device of its profile
    RUNNING = "RUNNING"  # its worker answers and grades the rows
    COMPLETED = "COMPLETED"  # every row answered; the report is kept
    FAILED = "FAILED"  # ended with a reason; its answers are kept for a retry
    CANCELLED = "CANCELLED"  # ended by a user


class RunPhase(StrEnum):
    QUEUED = "QUEUED"  # accepted; waiting for devices
    PREPARING = "PREPARING"  # devices held; the worker reads, checks and renders the rows
    TRAINING = "TRAINING"  # optimizer updates
    PAUSING = "PAUSING"  # a pause was accepted; the worker is saving or stopping
    PAUSED = "PAUSED"  # stopped with its devices released; resumes as a new attempt
    COMPLETED = "COMPLETED"  # its final save is registered as the project's model
    FAILED = "FAILED"  # ended with a reason
    CANCELLED = "CANCELLED"  # ended by a user
