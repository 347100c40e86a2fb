"""The frame every reporting job's worker runs in (analyses, evaluations, distillations, runs): read the spec
through its kind's model (a worker whose lease is gone before it starts exits 3), heart-beat from a Reporter
while the work runs, and send the job's last word (`schemas.outcomes`) — what the work returns (completed), or a
failure with its reason: a refusal of the input (another attempt would fail the same way) or any other error (the
host, its caches, the connection: another attempt may succeed).

Two ends send nothing: `Ended` (the server already ended the job, e.g. a distillation's failed smoke) and
`Abandoned` (the attempt cannot go on here, e.g. a replica process died: the worker exits non-zero and the
kernel's recovery policy for a lost worker applies).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

from optimize.schemas.jobs import Spec
from optimize.schemas.outcomes import LastWord
from optimize.worker.channel import ApiError, Channel
from optimize.worker.reporter import Reporter

ABANDONED_STATUS = 4


class Ended(Exception):
    """The server has ended the job already; the worker stops without a last word."""


class Abandoned(Exception):
    """The attempt cannot go on in this worker; it exits non-zero and is treated as a lost worker."""


Work = Callable[[Channel, dict[str, Any], Reporter], LastWord | None]


def run_framed(channel: Channel, spec_model: type[Spec], work: Work, *, refusals: tuple[type[Exception], ...],
               refused: bool = False, failed_prefix: str = "") -> int:
    """Run `work(channel, spec, reporter)` and report its last word (`refused`: whether a refusal's failure is
    marked as one, so no other attempt is made); the worker's exit status."""
    try:
        spec = channel.spec(spec_model)
    except ApiError as error:
        print(f"cannot start: {error.message}", flush=True)
        return 3
    reporter = Reporter(channel, channel.base, spec["leaseSeconds"]).start()
    try:
        result = work(channel, spec, reporter) or LastWord()
    except Ended as ended:
        reporter.stop()
        print(ended, flush=True)
        return 0
    except Abandoned as abandoned:
        reporter.stop()
        print(abandoned, flush=True)  # the last line of the log: the reason the executor reports
        return ABANDONED_STATUS
    except refusals as refusal:
        result = LastWord.failure(str(refusal), refused=refused)
    except Exception as error:  # noqa: BLE001 - the process edge: the reason goes on the job
        traceback.print_exc()
        result = LastWord.failure(f"{failed_prefix}{type(error).__name__}: {error}")
    return reporter.end(f"{channel.base}/result", result.wire())
