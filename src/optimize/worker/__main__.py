"""`python -m optimize.worker KIND JOB_ID --server URL` (the lease token comes in OPTIMIZE_LEASE_TOKEN)."""

from __future__ import annotations

import argparse
import sys
import warnings

from optimize.core.environment import setting
from optimize.worker.kinds import ENTRIES


def main() -> int:
    parser = argparse.ArgumentParser(prog="optimize.worker")
    parser.add_argument("kind", choices=list(ENTRIES))
    parser.add_argument("job_id")
    parser.add_argument("--server", required=True)
    parser.add_argument("--replica", type=int, help="a replica process (worker.replicas) the job's worker started")
    args = parser.parse_args()
    if args.replica is not None:
        run_replica = ENTRIES[args.kind].replica
        if run_replica is None:
            parser.error(f"a {args.kind} worker starts no replicas")
        return run_job(args.kind, args.job_id, args.server,
                       lambda channel, job_id: run_replica(channel, job_id, args.replica))
    return run_job(args.kind, args.job_id, args.server)


def run_job(kind: str, job_id: str, server: str, entry=None) -> int:
    """The job's work (its kind's worker entry unless `entry` is given), started as a process of its own or forked
    from a warm worker (`optimize.worker.warm`)."""
    token = setting("OPTIMIZE_LEASE_TOKEN")
    if not token:
        print("OPTIMIZE_LEASE_TOKEN is not set", file=sys.stderr)
        return 2
    from optimize.worker.channel import Channel

    # PEFT reads Transformers' deprecated `is_gradient_checkpointing` when it wraps a model: noise in every run's log
    warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
    with Channel(server, token, kind, job_id) as channel:
        return (entry or ENTRIES[kind].run)(channel, job_id)


if __name__ == "__main__":
    sys.exit(main())
