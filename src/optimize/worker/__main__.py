"""`python -m optimize.worker KIND JOB_ID --server URL` (the lease token comes in OPTIMIZE_LEASE_TOKEN)."""

from __future__ import annotations

import argparse
import os
import sys


def main() -> int:
    parser = argparse.ArgumentParser(prog="optimize.worker")
    from optimize.jobs.registry import KINDS

    parser.add_argument("kind", choices=list(KINDS))
    parser.add_argument("job_id")
    parser.add_argument("--server", required=True)
    args = parser.parse_args()
    return run_job(args.kind, args.job_id, args.server)


def run_job(kind: str, job_id: str, server: str) -> int:
    """The job's work, started as a process of its own or forked from a warm worker (`optimize.worker.warm`)."""
    from optimize.jobs.registry import worker_entry

    token = os.environ.get("OPTIMIZE_LEASE_TOKEN")
    if not token:
        print("OPTIMIZE_LEASE_TOKEN is not set", file=sys.stderr)
        return 2
    from optimize.worker.channel import Channel

    with Channel(server, token, kind, job_id) as channel:
        return worker_entry(kind)(channel, job_id)


if __name__ == "__main__":
    sys.exit(main())
