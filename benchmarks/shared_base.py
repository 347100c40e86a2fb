"""A sweep's points trained on one loaded base (`execution.shareBase: true`) against the same points trained one
after another, each in a worker of its own.

A real server in a temporary data dir; the stand-in (`--model`, default optimize/small-smollm2) selected, generated
chat rows registered and analyzed, a parent run trained; then the parent is swept over `--points` learning rates
twice, each sweep submitted in one call so its points queue together:

(a) alone: the parent states `execution.shareBase: false`, so the points are granted the device one after another,
    each loading the base in a worker of its own;
(b) shared: a second parent, the same but for `execution.shareBase: true`, so its points are granted the device
    together and one worker trains them, an update of each in turn, on one loaded base.

It prints, for each, the wall time from the sweep's submission to its last point's end and the device's tokens/s
(every point's tokens over that time), the shared one's as a ratio against the anchor (the points alone), and
checks that each shared point trained the losses of its point alone. On the cpu the base is small and an update
is quick, so what sharing saves is each point's worker start and model load; on a GPU it is also a device a small
model leaves mostly idle.

    .venv/bin/python benchmarks/shared_base.py [--model optimize/small-smollm2] [--points 4] [--steps 20]
                                               [--rows 64] [--max-seq-length 256]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from local_server import AKKA, start_server, stop_server  # noqa: E402

SEED = 0


def akka(url: str, *args: str) -> str:
    import os
    import subprocess

    done = subprocess.run([*AKKA, *args], env={**os.environ, "OPTIMIZE_URL": url}, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"akka {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def make_rows(count: int) -> list[dict]:
    rnd = random.Random(SEED)
    words = ["router", "camera", "laptop", "printer", "monitor", "headset", "keyboard", "tablet"]
    return [{"messages": [{"role": "user", "content": f"My {rnd.choice(words)} fails after {rnd.randint(1, 60)} "
                                                      "minutes. What should I try first?"},
                          {"role": "assistant", "content": f"Restart the {rnd.choice(words)} and update it; "
                                                           f"then try again for {rnd.randint(1, 9)} minutes."}]}
            for _ in range(count)]


def parent_plan(model: str, shared: bool, steps: int, max_seq_length: int) -> dict:
    return {"kind": "run", "project": "bench", "baseModel": model,
            "config": {"dataset": "bench/chat", "seed": SEED, "maxSeqLength": max_seq_length,
                       "hyperparams": {"optimizer": {"learningRate": 0.002},
                                       "training": {"batchSize": 4, "maxSteps": steps}}},
            "execution": {"deviceProfile": "cpu", "shareBase": shared}}


def swept(client, parent: str, rates: list[float]) -> dict:
    """Sweep `parent` over the learning rates; the points as they ended and the wall time to the last one."""
    grid = {"axes": [{"path": "hyperparams.optimizer.learningRate", "values": rates}]}
    started = time.monotonic()
    points = client.post(f"/v1/training/runs/{parent}/sweep", json={"grid": grid})["runs"]
    ended = {}
    while len(ended) < len(points):
        for point in points:
            run = client.get(f"/v1/training/runs/{point['runId']}")
            if run["terminal"] and point["runId"] not in ended:
                ended[point["runId"]] = run
        time.sleep(0.2)
    seconds = time.monotonic() - started
    for run in ended.values():
        if run["phase"] != "COMPLETED":
            sys.exit(f"point {run['runId']} ended {run['phase']}: {run.get('failureReason')}")
    losses = {run_id: [step["loss"] for step in client.get(f"/v1/training/runs/{run_id}/metrics")["steps"]]
              for run_id in ended}
    ordered = [ended[point["runId"]] for point in points]
    return {"seconds": seconds, "tokens": sum(run["results"]["tokens"] for run in ordered),
            "losses": [losses[run["runId"]] for run in ordered], "runs": ordered}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="optimize/small-smollm2")
    parser.add_argument("--points", type=int, default=4)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--max-seq-length", type=int, default=256)
    args = parser.parse_args()
    from optimize.client.credentials import find_token
    from optimize.client.http import OptimizeClient

    work = Path(tempfile.mkdtemp(prefix="bench-shared-"))
    server, url = start_server(work / "data")
    try:
        rows = work / "rows.jsonl"
        rows.write_text("".join(json.dumps(row) + "\n" for row in make_rows(args.rows)))
        akka(url, "training", "base-models", "select", args.model)
        akka(url, "registry", "datasets", "register", "bench/chat", "-f", str(rows))
        akka(url, "training", "projects", "create", "bench")
        akka(url, "training", "datasets", "analyze", "bench/chat", "--model", args.model, "--wait")
        rates = [0.002 * (index + 1) for index in range(args.points)]
        with OptimizeClient(url, token=find_token(url), timeout=600) as client:
            parents = {}
            for shared in (False, True):
                run = client.post("/v1/training/runs", json=parent_plan(args.model, shared, args.steps,
                                                                        args.max_seq_length))
                while not (run := client.get(f"/v1/training/runs/{run['runId']}"))["terminal"]:
                    time.sleep(0.2)
                if run["phase"] != "COMPLETED":
                    sys.exit(f"the parent ended {run['phase']}: {run.get('failureReason')}")
                parents[shared] = run["runId"]
            alone = swept(client, parents[False], rates)
            together = swept(client, parents[True], rates)
    finally:
        stop_server(server)
        shutil.rmtree(work, ignore_errors=True)

    same = all(len(a) == len(b) and all(abs(x - y) <= 1e-4 * max(1.0, abs(y)) for x, y in zip(a, b, strict=True))
               for a, b in zip(together["losses"], alone["losses"], strict=True))
    shared_with = [len(run["cost"].get("sharedBase", {}).get("runs", [])) for run in together["runs"]]
    print(f"{args.points} sweep points of {args.steps} updates on {args.model} (cpu)")
    for name, found in (("alone (anchor)", alone), ("shared base", together)):
        print(f"  {name:15} {found['seconds']:7.1f} s to the last point, {found['tokens'] / found['seconds']:8.0f} "
              "tokens/s on the device")
    ratio = together["seconds"] / alone["seconds"]
    print(f"  shared/alone wall time {ratio:.2f} (device tokens/s {1 / ratio:.2f}x); each shared point trained beside "
          f"{shared_with} others; losses {'the same' if same else 'DIFFERENT'} point for point")
    print("RESULT " + json.dumps({"points": args.points, "aloneSeconds": round(alone["seconds"], 2),
                                  "sharedSeconds": round(together["seconds"], 2), "ratio": round(ratio, 3),
                                  "sameLosses": same}))
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
