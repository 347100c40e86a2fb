"""`python -m optimize.worker KIND JOB_ID --server URL` (the lease token comes in OPTIMIZE_LEASE_TOKEN); with
`--shared-with ID,ID` the process serves those jobs too, granted beside it (their tokens in OPTIMIZE_SHARED_LEASES).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings

from optimize.core.environment import setting
from optimize.worker.kinds import ENTRIES


def main() -> int:
    return serve(sys.argv[1:])


def serve(arguments: list[str]) -> int:
    """The worker a command line (after `python -m optimize.worker`) describes, started or forked warm."""
    parser = argparse.ArgumentParser(prog="optimize.worker")
    parser.add_argument("kind", choices=list(ENTRIES))
    parser.add_argument("job_id")
    parser.add_argument("--server", required=True)
    parser.add_argument("--replica", type=int, help="a replica process (worker.replicas) the job's worker started")
    parser.add_argument("--shared-with", help="jobs granted beside it that this process serves too")
    args = parser.parse_args(arguments)
    if args.shared_with:
        return run_shared(args.kind, [args.job_id, *args.shared_with.split(",")], args.server)
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

    _quiet()
    with Channel(server, token, kind, job_id) as channel:
        return (entry or ENTRIES[kind].run)(channel, job_id)


def run_shared(kind: str, job_ids: list[str], server: str) -> int:
    """Jobs granted together, served by this one process through its kind's shared entry, each on a channel of its
    own (its own lease token)."""
    shared = ENTRIES[kind].shared
    tokens = {job_ids[0]: setting("OPTIMIZE_LEASE_TOKEN"), **json.loads(setting("OPTIMIZE_SHARED_LEASES") or "{}")}
    if shared is None or not all(tokens.get(job) for job in job_ids):
        print("a shared worker needs its kind's shared entry and every job's lease token", file=sys.stderr)
        return 2
    from optimize.worker.channel import Channel

    _quiet()
    channels = [Channel(server, tokens[job], kind, job) for job in job_ids]
    try:
        return shared(list(zip(channels, job_ids, strict=True)))
    finally:
        for channel in channels:
            channel.close()


def _quiet() -> None:
    # PEFT reads Transformers' deprecated `is_gradient_checkpointing` when it wraps a model: noise in every run's log
    warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)


if __name__ == "__main__":
    sys.exit(main())
