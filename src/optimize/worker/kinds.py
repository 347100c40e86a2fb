"""What `python -m optimize.worker KIND JOB_ID` runs for each job kind: the job's entry, and for a kind whose job
spans several devices, the entry of each further device's replica process (`worker.replicas`).

Each entry imports its kind's worker module when it is called, so a worker process imports only the kind it
runs. The API's table of the same kinds is `api.kinds`, the CLI's `cli.kinds`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from optimize.worker.channel import Channel


@dataclass(frozen=True)
class WorkerEntry:
    run: Callable[[Channel, str], int]  # (channel, job id) -> exit code
    replica: Callable[[Channel, str, int], int] | None = None  # (channel, job id, replica index) -> exit code
    # [(channel, job id)] of jobs granted together -> exit code: one process serving them all (runs on one base)
    shared: Callable[[list[tuple[Channel, str]]], int] | None = None


def _run(channel: Channel, run_id: str) -> int:
    from optimize.worker.run import run_training

    return run_training(channel, run_id)


def _run_replica(channel: Channel, run_id: str, index: int) -> int:
    from optimize.worker.run import run_replica

    return run_replica(channel, run_id, index)


def _runs_shared(served: list[tuple[Channel, str]]) -> int:
    from optimize.worker.shared_base import run_shared

    return run_shared(served)


def _analysis(channel: Channel, analysis_id: str) -> int:
    from optimize.worker.analysis import run_analysis

    return run_analysis(channel, analysis_id)


def _evaluation(channel: Channel, evaluation_id: str) -> int:
    from optimize.worker.evaluation import run_evaluation

    return run_evaluation(channel, evaluation_id)


def _distillation(channel: Channel, distillation_id: str) -> int:
    from optimize.worker.distillation import run_distillation

    return run_distillation(channel, distillation_id)


def _distillation_replica(channel: Channel, distillation_id: str, index: int) -> int:
    from optimize.worker.distillation import run_replica

    return run_replica(channel, distillation_id, index)


def _curation(channel: Channel, curation_id: str) -> int:
    from optimize.worker.curation import run_curation

    return run_curation(channel, curation_id)


def _endpoint(channel: Channel, endpoint_id: str) -> int:
    from optimize.worker.endpoint import run_endpoint

    return run_endpoint(channel, endpoint_id)


ENTRIES: dict[str, WorkerEntry] = {
    "run": WorkerEntry(_run, replica=_run_replica, shared=_runs_shared),
    "analysis": WorkerEntry(_analysis),
    "evaluation": WorkerEntry(_evaluation),
    "distillation": WorkerEntry(_distillation, replica=_distillation_replica),
    "curation": WorkerEntry(_curation),
    "endpoint": WorkerEntry(_endpoint),
}
