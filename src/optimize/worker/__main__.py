"""`python -m optimize.worker KIND JOB_ID --server URL` (the lease token comes in OPTIMIZE_LEASE_TOKEN)."""

from __future__ import annotations

import argparse
import os
import sys


def main() -> int:
    parser = argparse.ArgumentParser(prog="optimize.worker")
    from optimize.jobs.registry import KINDS, worker_entry

    parser.add_argument("kind", choices=list(KINDS))
    parser.add_argument("job_id")
    parser.add_argument("--server", required=True)
    args = parser.parse_args()
    token = os.environ.get("OPTIMIZE_LEASE_TOKEN")
    if not token:
        print("OPTIMIZE_LEASE_TOKEN is not set", file=sys.stderr)
        return 2
    from optimize.worker.channel import Channel

    with Channel(args.server, token, args.kind, args.job_id) as channel:
        return worker_entry(args.kind)(channel, args.job_id)


if __name__ == "__main__":
    sys.exit(main())
