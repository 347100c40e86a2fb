"""The phases of every kind of job, as the answers carry them: what one kind reads of another's (an analysis's for a
run's length check and estimate, an evaluation's for a run's reward check and the scores, a run's for the throughput
of completed runs) and what the CLI reads of any (`cli.progress`). Each kind's lifecycle table is built on its enum
here (`analysis.states`, `evaluation.phases`, `training.server.phases`, `distillation.phases`, `curation.phases`,
`serving.phases`); code compares phases to these members, never to strings."""

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


class DistillationPhase(StrEnum):
    QUEUED = "QUEUED"  # waiting for its devices
    RUNNING = "RUNNING"  # its teacher answers the source's decisions (first the smoke, then the rest)
    PAUSED = "PAUSED"  # holds its saved answers and no device
    ASSEMBLING = "ASSEMBLING"  # its device released; the server registers the accepted rows
    COMPLETED = "COMPLETED"  # the dataset is registered
    FAILED = "FAILED"  # a failed smoke, no answer accepted, a refusal
    CANCELLED = "CANCELLED"  # ended by a user


class CurationPhase(StrEnum):
    QUEUED = "QUEUED"  # waiting for a device of its profile
    RUNNING = "RUNNING"  # its judge scores the sessions' candidates
    ASSEMBLING = "ASSEMBLING"  # its device released; the server registers the kept candidates
    COMPLETED = "COMPLETED"  # the dataset version is registered
    FAILED = "FAILED"  # nothing kept, the registry refused the rows, or a refusal
    CANCELLED = "CANCELLED"  # ended by a user


class EndpointPhase(StrEnum):
    AWAITING_CAPACITY = "AWAITING_CAPACITY"  # waiting for a device of its profile (a serving slot on a cpu)
    STARTING = "STARTING"  # its worker loads the base model and the adapters
    READY = "READY"  # answers requests for every model whose adapter is loaded
    FAILED = "FAILED"  # ended with a reason
    DELETED = "DELETED"  # taken down by a user, or after its idle timeout


class ComparisonPhase(StrEnum):
    EVALUATING = "EVALUATING"  # its evaluations (one a model, reused where done) answer the dataset
    SCORING = "SCORING"  # every evaluation ended; the server scores the models and names the winner
    COMPLETED = "COMPLETED"  # scored: Complete (every model scored) or Partial (some failed; no winner)
    FAILED = "FAILED"  # no model could be scored, or a refusal
    CANCELLED = "CANCELLED"  # ended by a user


class PipelinePhase(StrEnum):
    PENDING = "PENDING"  # accepted; the scheduler starts it at its next tick
    RUNNING = "RUNNING"  # its stages run one after another, each as a job of its own kind
    COMPLETED = "COMPLETED"  # every stage completed
    FAILED = "FAILED"  # a stage failed, or a gate stopped it; a resume starts the failed stage again
    CANCELLED = "CANCELLED"  # ended by a user (the stage running was cancelled with it)
