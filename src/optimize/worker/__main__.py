"""`python -m optimize.worker KIND JOB_ID --server URL` (the lease token comes in OPTIMIZE_LEASE_TOKEN)."""

from __future__ import annotations

import argparse
import os
import sys


def main() -> int:
    parser = argparse.ArgumentParser(prog="optimize.worker")
    parser.add_argument("kind", choices=["analysis", "run", "evaluation", "endpoint"])
    parser.add_argument("job_id")
    parser.add_argument("--server", required=True)
    args = parser.parse_args()
    token = os.environ.get("OPTIMIZE_LEASE_TOKEN")
    if not token:
        print("OPTIMIZE_LEASE_TOKEN is not set", file=sys.stderr)
        return 2
    from optimize.worker.channel import Channel

    with Channel(args.server, token) as channel:
        if args.kind == "run":
            from optimize.worker.run import run_training

            return run_training(channel, args.job_id)
        if args.kind == "evaluation":
            from optimize.worker.evaluation import run_evaluation

            return run_evaluation(channel, args.job_id)
        if args.kind == "endpoint":
            from optimize.worker.endpoint import run_endpoint

            return run_endpoint(channel, args.job_id)
        from optimize.worker.analysis import run_analysis

        return run_analysis(channel, args.job_id)


if __name__ == "__main__":
    sys.exit(main())
