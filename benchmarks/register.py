"""Dataset registration throughput against the physical limit of the disk.

Generates a chat JSONL file (1 GiB by default), starts a real server, registers the file with
`akka registry datasets register`, and compares its MiB/s with `sha256sum` + `cp` of the same file on the same
disk. Also samples the server's RSS to report its peak growth while registering.

    .venv/bin/python benchmarks/register.py [--size-gib 1.0] [--shard-size 256MiB] [--keep]

Targets: ratio >= 0.5, server RSS growth < 150 MiB. Prints a report and a `RESULT {json}` line.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import psutil

MIB = 1024 * 1024
WORDS = ("order router laptop refund shipping invoice delivery warranty battery screen cable account password "
         "update firmware reset network signal printer speaker billing address customer ticket urgent please "
         "thanks today tomorrow broken missing damaged replace return label support agent").split()
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]


def sentence(rnd: random.Random, words: int) -> str:
    return " ".join(rnd.choices(WORDS, k=words)).capitalize() + "."


def row(rnd: random.Random, index: int) -> dict:
    messages = [{"role": "system", "content": sentence(rnd, 20)}]
    for _ in range(rnd.randint(1, 4)):
        messages.append({"role": "user", "content": sentence(rnd, rnd.randint(30, 150))})
        messages.append({"role": "assistant", "content": sentence(rnd, rnd.randint(30, 200))})
    if index % 10 == 0:
        call = {"id": f"c{index}", "type": "function", "function": {"name": "lookup", "arguments": {"q": str(index)}}}
        messages[-1:] = [{"role": "assistant", "content": "Checking.", "tool_calls": [call]},
                         {"role": "tool", "tool_call_id": f"c{index}", "content": sentence(rnd, 20)},
                         {"role": "assistant", "content": sentence(rnd, 40)}]
        return {"messages": messages, "tools": TOOLS}
    return {"messages": messages}


def generate(path: Path, size: int) -> int:
    """Write rows until the file reaches `size` bytes; a pool of distinct rows is cycled for speed."""
    rnd = random.Random(0)
    pool = [(json.dumps(row(rnd, i)) + "\n").encode() for i in range(5000)]
    written = rows = 0
    with path.open("wb") as handle:
        while written < size:
            batch = b"".join(pool[(rows + i) % len(pool)] for i in range(1000))
            handle.write(batch)
            written += len(batch)
            rows += 1000
    return rows


def start_server(data_dir: Path) -> tuple[subprocess.Popen, str]:
    command = [sys.executable, "-m", "optimize", "server", "start", "--port", "0", "--data-dir", str(data_dir)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ready = data_dir / "server.json"
    for _ in range(600):
        if ready.exists():
            url = json.loads(ready.read_text())["url"]
            try:
                urllib.request.urlopen(f"{url}/v1/health", timeout=2).close()
                return process, url
            except OSError:
                pass
        time.sleep(0.1)
    process.kill()
    raise SystemExit("the server did not start")


class RssSampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.process = psutil.Process(pid)
        self.baseline = self.peak = self.process.memory_info().rss
        self.running = True

    def run(self) -> None:
        while self.running:
            try:
                self.peak = max(self.peak, self.process.memory_info().rss)
            except psutil.NoSuchProcess:
                return
            time.sleep(0.05)


def timed(command: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return time.perf_counter() - start, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gib", type=float, default=1.0)
    parser.add_argument("--shard-size", default=None, help="pass --shard-size to register (default: none)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="optimize-bench-"))
    server = None
    try:
        path = work / "chat.jsonl"
        rows = generate(path, int(args.size_gib * 1024 * MIB))
        size = path.stat().st_size
        server, url = start_server(work / "data")
        sampler = RssSampler(server.pid)
        sampler.start()
        register = [sys.executable, "-m", "optimize", "registry", "datasets", "register", "bench/chat", "-f", str(path),
                    "-o", "json", "--server", url]
        if args.shard_size:
            register += ["--shard-size", args.shard_size]
        seconds, output = timed(register)
        sampler.running = False
        sampler.join()
        version = json.loads(output)
        assert version["examples"] == rows and version["upload"]["sent"] >= 1, version
        limit_seconds = timed(["sha256sum", str(path)])[0] + timed(["cp", str(path), str(work / "copy.jsonl")])[0]
        (work / "copy.jsonl").unlink()
        report(size, rows, seconds, limit_seconds, (sampler.peak - sampler.baseline) / MIB, version["shards"])
    finally:
        if server is not None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def report(size: int, rows: int, seconds: float, limit_seconds: float, rss_growth_mib: float, shards: int) -> None:
    rate = size / MIB / seconds
    limit_rate = size / MIB / limit_seconds
    ratio = rate / limit_rate
    print(f"file                 {size / MIB:,.0f} MiB, {rows:,} chat rows, {shards} shard(s)")
    print(f"akka register        {seconds:6.2f} s  {rate:7.1f} MiB/s")
    print(f"sha256sum + cp       {limit_seconds:6.2f} s  {limit_rate:7.1f} MiB/s  (physical limit)")
    print(f"ratio                {ratio:6.2f}    target >= 0.5   {'PASS' if ratio >= 0.5 else 'MISS'}")
    print(f"server RSS growth    {rss_growth_mib:6.1f} MiB target < 150   {'PASS' if rss_growth_mib < 150 else 'MISS'}")
    print("RESULT " + json.dumps({"bytes": size, "rows": rows, "registerSeconds": round(seconds, 3),
                                  "registerMiBps": round(rate, 1), "limitSeconds": round(limit_seconds, 3),
                                  "limitMiBps": round(limit_rate, 1), "ratio": round(ratio, 3),
                                  "rssGrowthMiB": round(rss_growth_mib, 1)}))


if __name__ == "__main__":
    main()
