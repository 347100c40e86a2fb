"""Dry-run latency over a large sharded dataset.

Starts a real server in a temporary data dir on /tmp, selects the stand-in `optimize/tiny-llama-3.2`, streams a
chat JSONL file of about `--gib` GiB to disk (varied rows: single- and multi-turn, some with a system prompt, 1%
exact duplicates of a recent row), registers it as `bench/big` with `akka registry datasets register` (cut into
256 MiB shards; its time and MiB/s are printed), creates the project `bench` and writes a run plan
(`config.dataset: bench/big`, `maxSeqLength: 2048`). It then times `POST /v1/training/runs?dryRun=true`:
the server's first dry run, `--repeat` more (median), and the first dry run after a server restart with the
dataset's blobs evicted from the page cache (`posix_fadvise(DONTNEED)` on each blob; the VM host may still
cache them), and `akka training runs start -f PLAN --dry-run` end to end (a new CLI process each time, Python
start-up and imports included). Every other timing is warm: the blobs were just written, so they sit in the
page cache. No analysis is run, so `resolved.lengths` says none exists (the dry run then reads only the rows
it diagnoses).

    .venv/bin/python benchmarks/dry_run.py [--gib 2.0] [--repeat 5] [--keep]

Target: a dry run over a 2 GiB sharded dataset answers in under 5 s. Prints a report and a
`RESULT {json}` line; the temporary directory (about 2x --gib on disk: the file and its blobs) is deleted at the
end unless --keep.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

MIB = 1024 * 1024
GIB = 1024 * MIB
MODEL = "optimize/tiny-llama-3.2"
DATASET = "bench/big"
TARGET_SECONDS = 5.0
WORDS = ("order router laptop refund shipping invoice delivery warranty battery screen cable account password "
         "update firmware reset network signal printer speaker billing address customer ticket urgent please "
         "thanks today tomorrow broken missing damaged replace return label support agent monday parcel courier "
         "tracking number subscription plan upgrade downgrade charger keyboard mouse monitor headset driver "
         "install error code restart cloud backup storage sync email login verify").split()
SYSTEMS = ["You answer support tickets politely and briefly.", "You are a billing assistant.",
           "Answer in one short paragraph.", "You help customers track parcels."]


def generate(path: Path, size: int, duplicate_every: int = 100) -> tuple[int, int]:
    """Stream chat rows to `path` until it reaches `size` bytes; returns (rows, planned duplicates).

    Each row names its own ticket number, so rows differ unless copied on purpose: every `duplicate_every`-th
    row repeats one of the last 64 rows byte for byte. Text is drawn from a pool of random sentences."""
    rnd = random.Random(0)
    pool = [" ".join(rnd.choices(WORDS, k=rnd.randint(6, 30))).capitalize() + "." for _ in range(4096)]
    recent: collections.deque[str] = collections.deque(maxlen=64)
    rows = duplicates = written = 0
    with path.open("w", encoding="utf-8") as sink:
        while written < size:
            batch = []
            for _ in range(2000):
                if rows % duplicate_every == duplicate_every - 1 and recent:
                    line = recent[rnd.randrange(len(recent))]
                    duplicates += 1
                else:
                    messages = [{"role": "system", "content": rnd.choice(SYSTEMS)}] if rows % 5 == 0 else []
                    for turn in range(3 if rows % 4 == 0 else 1):
                        user = " ".join(rnd.choices(pool, k=rnd.randint(1, 6)))
                        if turn == 0:
                            user = f"Ticket {rows}: {user}"
                        messages.append({"role": "user", "content": user})
                        answer = " ".join(rnd.choices(pool, k=rnd.randint(2, 10)))
                        messages.append({"role": "assistant", "content": answer})
                    line = json.dumps({"messages": messages}) + "\n"
                    recent.append(line)
                batch.append(line)
                rows += 1
            chunk = "".join(batch)
            sink.write(chunk)
            written += len(chunk)  # ASCII only, so characters are bytes
    return rows, duplicates


def start_server(data_dir: Path) -> tuple[subprocess.Popen, str]:
    data_dir.mkdir(parents=True, exist_ok=True)
    ready = data_dir / "server.json"
    ready.unlink(missing_ok=True)
    command = [sys.executable, "-m", "optimize", "server", "start", "--port", "0", "--data-dir", str(data_dir)]
    with (data_dir / "server.log").open("ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                   env={**os.environ, "HF_HUB_OFFLINE": "1"})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited with {process.returncode}; see {data_dir / 'server.log'}")
        if ready.exists():
            try:
                url = json.loads(ready.read_text())["url"]
                if httpx.get(f"{url}/v1/health", timeout=2).status_code == 200:
                    return process, url
            except (ValueError, KeyError, httpx.HTTPError):
                pass
        time.sleep(0.1)
    process.kill()
    raise SystemExit("the server did not start")


def stop_server(process: subprocess.Popen | None) -> None:
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def akka(url: str, *args: str, json_out: bool = True) -> tuple[float, str]:
    command = [sys.executable, "-m", "optimize", *args, "--server", url] + (["-o", "json"] if json_out else [])
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return seconds, done.stdout


def dry_run(url: str, plan: dict) -> tuple[float, dict]:
    from optimize.client.credentials import find_token  # the token the CLI would send (OPTIMIZE_TOKEN, a login,
    # or the admin token of a server this user runs here)

    token = find_token(url, os.environ.get("OPTIMIZE_TOKEN"))
    start = time.perf_counter()
    answer = httpx.post(f"{url}/v1/training/runs", params={"dryRun": "true"}, json=plan, timeout=300,
                        headers={"Authorization": f"Bearer {token}"} if token else None)
    seconds = time.perf_counter() - start
    if answer.status_code != 200:
        raise SystemExit(f"the dry run answered {answer.status_code}: {answer.text[:2000]}")
    return seconds, answer.json()


def evict(blobs: Path) -> tuple[int, int]:
    """Flush and drop every blob's pages from the page cache (posix_fadvise DONTNEED, this file only)."""
    files = size = 0
    for path in blobs.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
            files, size = files + 1, size + path.stat().st_size
    return files, size


def cached_bytes(blobs: Path) -> int | None:
    """Bytes of the blobs in the page cache, by `fincore` (None where it is missing)."""
    paths = [str(p) for p in blobs.rglob("*") if p.is_file()]
    if not shutil.which("fincore") or not paths:
        return None
    done = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", *paths],
                          capture_output=True, text=True)
    return sum(int(v) for v in done.stdout.split()) if done.returncode == 0 else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=2.0, help="size of the generated dataset (default 2)")
    parser.add_argument("--repeat", type=int, default=5, help="repeated dry runs after the first (default 5)")
    parser.add_argument("--cli-repeat", type=int, default=3, help="CLI dry runs end to end (default 3)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()

    free = shutil.disk_usage("/tmp").free
    needed = int(2.2 * args.gib * GIB) + GIB  # the file, its blobs, the model and slack
    print(f"/tmp has {free / GIB:.1f} GiB free; this run needs about {needed / GIB:.1f} GiB")
    if free < needed:
        raise SystemExit(f"not enough room on /tmp for --gib {args.gib}; pass a smaller --gib")

    work = Path(tempfile.mkdtemp(prefix="optimize-dryrun-bench-", dir="/tmp"))
    data = work / "data"
    server = None
    try:
        server, url = start_server(data)
        select_seconds, _ = akka(url, "training", "base-models", "select", MODEL)
        print(f"selected {MODEL} in {select_seconds:.1f} s")

        path = work / "big.jsonl"
        start = time.perf_counter()
        rows, planned_duplicates = generate(path, int(args.gib * GIB))
        size = path.stat().st_size
        print(f"generated {size / GIB:.2f} GiB, {rows:,} rows ({planned_duplicates:,} duplicates) in "
              f"{time.perf_counter() - start:.1f} s")

        register_seconds, output = akka(url, "registry", "datasets", "register", DATASET, "-f", str(path))
        version = json.loads(output)
        print(f"registered {version.get('reference', DATASET)} in {register_seconds:.1f} s")
        path.unlink()  # the blobs hold it now
        akka(url, "training", "projects", "create", "bench")

        plan = {"kind": "run", "project": "bench", "baseModel": MODEL,
                "config": {"dataset": DATASET, "maxSeqLength": 2048}}
        plan_path = work / "plan.json"
        plan_path.write_text(json.dumps(plan, indent=2))

        first, answer = dry_run(url, plan)
        repeats = [dry_run(url, plan)[0] for _ in range(args.repeat)]
        cli = [akka(url, "training", "runs", "start", "-f", str(plan_path), "--dry-run", json_out=False)[0]
               for _ in range(args.cli_repeat)]
        cli_output = akka(url, "training", "runs", "start", "-f", str(plan_path), "--dry-run", json_out=False)[1]

        stop_server(server)
        server = None
        blobs = data / "blobs"
        before = cached_bytes(blobs)
        evicted_files, evicted_bytes = evict(blobs)
        after = cached_bytes(blobs)
        server, url = start_server(data)
        cold, _ = dry_run(url, plan)

        report(args, size, rows, planned_duplicates, version, register_seconds, answer, first, repeats, cli,
               cold, (evicted_files, evicted_bytes, before, after), cli_output)
    finally:
        stop_server(server)
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def report(args, size: int, rows: int, planned_duplicates: int, version: dict, register_seconds: float,
           answer: dict, first: float, repeats: list[float], cli: list[float], cold: float,
           eviction: tuple[int, int, int | None, int | None], cli_output: str) -> None:
    diagnostics = answer["diagnostics"][0]
    coverage = diagnostics["coverage"]
    lengths = answer["resolved"]["lengths"][0]
    median = statistics.median(repeats) if repeats else first
    cli_median = statistics.median(cli) if cli else None
    worst = max([first, cold, *repeats, *cli])
    files, evicted, before, after = eviction
    shards = version.get("shards")
    print()
    print(cli_output.rstrip())
    print()
    print(f"dataset              {size / GIB:.2f} GiB ({size / MIB:,.0f} MiB), {shards} shard(s), "
          f"{version['examples']:,} rows (generated {rows:,}, {planned_duplicates:,} of them duplicates)")
    print(f"registration         {register_seconds:6.1f} s   {size / MIB / register_seconds:7.1f} MiB/s")
    print(f"examples read        {coverage['read']:,} of {coverage['total']:,}; complete {coverage['complete']}; "
          f"{diagnostics['duplicates']['count']} duplicate(s) found")
    if coverage.get("note"):
        print(f"  note: {coverage['note']}")
    print(f"lengths              {lengths['status']}: {lengths.get('note') or lengths.get('reason') or ''}".rstrip())
    print(f"dry run, API first   {first:6.3f} s   (the server's first; page cache warm)")
    print(f"dry run, API median  {median:6.3f} s   of {len(repeats)} more: "
          + ", ".join(f"{s:.3f}" for s in repeats))
    print(f"dry run, API cold    {cold:6.3f} s   (first after a restart, {files} blob(s), {evicted / MIB:,.0f} MiB "
          f"evicted; cached {_mib(before)} -> {_mib(after)})")
    if cli_median is not None:
        print(f"dry run, CLI median  {cli_median:6.3f} s   of {len(cli)}, end to end: "
              + ", ".join(f"{s:.3f}" for s in cli))
    verdict = "PASS" if worst < TARGET_SECONDS else "MISS"
    print(f"target               every dry run < {TARGET_SECONDS:.0f} s (slowest {worst:.3f} s)   {verdict}")
    print("RESULT " + json.dumps({
        "gib": args.gib, "bytes": size, "shards": shards, "rows": version["examples"],
        "registerSeconds": round(register_seconds, 2), "registerMiBps": round(size / MIB / register_seconds, 1),
        "read": coverage["read"], "total": coverage["total"], "duplicatesFound": diagnostics["duplicates"]["count"],
        "lengthsStatus": lengths["status"], "firstSeconds": round(first, 3), "medianSeconds": round(median, 3),
        "repeatSeconds": [round(s, 3) for s in repeats], "coldSeconds": round(cold, 3),
        "cliSeconds": [round(s, 3) for s in cli], "meetsTarget": worst < TARGET_SECONDS}))


def _mib(value: int | None) -> str:
    return "?" if value is None else f"{value / MIB:,.0f} MiB"


if __name__ == "__main__":
    main()
