"""An endpoint under concurrent clients: continuous batching's throughput and latency.

A real server on the embedded defaults in a temporary data dir (offline) selects the small stand-in (`--model`,
default optimize/small-smollm2) and trains two short supervised runs of it on the cpu, on different rows and at
different learning rates, each registering an adapter (`bench/answers-a:v1`, `bench/answers-b:v1`). One endpoint
serves the base model; the first adapter is served with `akka training endpoints create --model A --wait`, the
second attached to the same endpoint (`create --model B`), and the benchmark waits until every model answers.

Then, for each level of concurrent clients (`--levels`, default 1, 4, 16 and 64), every client loops for
`--seconds`, sending the server's `POST /v1/chat/completions` one request after another (the server proxies it to
the endpoint's worker). The requests are mixed: the base model and the two adapters in turn, half of them
streamed (read until `[DONE]`) and half not; the prompt is always the same chat (a fixed system and user
message) and the answer is `--max-tokens` tokens at temperature 0. An answer may still end early at the stop
token, so tokens are counted as generated (`usage.completion_tokens`; a streamed request asks for its usage chunk
with `stream_options.include_usage`) and the table shows the tokens per request. A client told 429 (the
endpoint's batch and queue are full) does not retry that request: it counts it, waits the Retry-After, and sends
its next one. A request not answered within `--timeout` seconds is a time-out, as is one the endpoint cuts at its
own limit (504, or a stream's error event `request_timeout`); any other status, error event, or a stream that
ends without `[DONE]` is a failure.

Per level it prints: requests answered, told 429, failed and timed out; requests/s and tokens/s (answered
requests and their generated tokens over the level's wall time, from its start to its last answer); the 50th and
95th percentile of a request's latency (submission to the last byte) and of a streamed request's time to its first
content; throughput and p95 as ratios to the one-client level; the cpu seconds used by the clients (this process),
the server, the endpoint's worker and other processes on the machine (noise: a level where other processes took
over 10% of the machine is marked disturbed, and so are the ratios taken from it); and the endpoint's own report
(`GET /v1/training/endpoints/{id}`, `load`: a heartbeat's figures over its last minute, so they mix levels).

Targets on the 2-core cpu, printed as ratios against them: 16 clients at least 4x the one-client tokens/s with a
p95 latency at most 3x the one-client p95; at 64 clients every request answered or told 429, none failed or timed
out. Then the 16-client level runs again with every request constrained to a JSON schema (`response_format`
json_schema, a string answer as long as the free ones): constrained decoding costs at most 1.3x, the free level's
tokens/s over the constrained level's.

    .venv/bin/python benchmarks/serve_load.py [--model optimize/small-smollm2] [--levels 1,4,16,64] [--seconds 20]
        [--max-tokens 32] [--timeout 120] [--steps 12] [--batch N] [--queue N] [--threads N] [--json PATH]

`--batch` and `--queue` set the endpoint's OPTIMIZE_ENDPOINT_BATCH (rows decoding together, default 16) and
OPTIMIZE_ENDPOINT_QUEUE (requests waiting for a row, default 64) in the server's environment, which its workers
inherit; `--threads` sets OMP_NUM_THREADS there (torch's threads in the workers; by default one per core).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from local_server import start_server, stop_server  # a module beside this file

AKKA = [sys.executable, "-m", "optimize"]
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "TRANSFORMERS_VERBOSITY": "error", "CUDA_VISIBLE_DEVICES": ""}
PROJECT = "bench"
SYSTEM = "You are a support assistant. Answer the customer in a few friendly sentences."
PROMPT = ("My router keeps dropping the wifi every hour since the last update, and restarting it only helps for a "
          "while. Order #4711. What should I do?")
PRODUCTS = ["keyboard", "camera", "router", "laptop", "printer", "monitor", "headset", "phone", "tablet", "speaker"]
ISSUES = ["keeps disconnecting", "drops the wifi every hour", "shows an error light", "will not turn on",
          "makes a buzzing noise", "arrived damaged", "gets very hot", "needs a firmware update"]
ADAPTERS = {  # name: (learning rate, the answer a row teaches)
    "answers-a": (0.002, "Thank you for writing about your {product}. I am sorry that it {issue}. Please restart it, "
                         "check the cable and the power supply, and install the newest firmware from our site. If it "
                         "still {issue} after that, reply with order {order} and we will send you a replacement "
                         "within three working days, free of charge."),
    "answers-b": (0.0005, "Step one: unplug the {product} for thirty seconds. Step two: plug it back in and wait "
                          "until the light is steady. Step three: open the settings and reset the network. Step "
                          "four: if it {issue} again, write down the time and send it to us with order {order}, and "
                          "a technician will call you back tomorrow."),
}
DASH = "—"


def say(text: str = "") -> None:
    print(text, flush=True)


# --- the server ---------------------------------------------------------------------------------------------


def akka(url: str, *args: str) -> str:
    done = subprocess.run([*AKKA, *args], env={**os.environ, **OFFLINE, "OPTIMIZE_URL": url}, capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise RuntimeError(f"akka {' '.join(args)} failed: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def last_json(output: str) -> dict:
    return json.loads(output.strip().splitlines()[-1])


# --- two adapters -----------------------------------------------------------------------------------------


def adapter_rows(template: str, count: int, seed: int) -> list[dict]:
    """Chat rows whose answers are long (more tokens than a benchmark answer), so an adapter keeps writing."""
    import random

    rnd = random.Random(seed)
    rows = []
    for index in range(count):
        product, issue = rnd.choice(PRODUCTS), rnd.choice(ISSUES)
        order = str(4000 + index)
        rows.append({"messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"My {product} {issue}. Order #{order}. What should I do?"},
            {"role": "assistant", "content": template.format(product=product, issue=issue, order=order)}]})
    return rows


def train_adapters(url: str, client, model: str, work: Path, steps: int) -> list[str]:
    """Register each adapter's rows, POST both run plans (the cpu trains them one after the other) and wait for
    both; the registered models' references."""
    runs = []
    for seed, (name, (rate, template)) in enumerate(ADAPTERS.items()):
        rows_file = work / f"{name}.jsonl"
        rows_file.write_text("".join(json.dumps(row) + "\n" for row in adapter_rows(template, 64, seed)))
        akka(url, "registry", "datasets", "register", f"{PROJECT}/{name}-rows", "-f", str(rows_file),
             "--alias", "train")
        plan = {"kind": "run", "project": PROJECT, "baseModel": model, "modelName": name,
                "config": {"dataset": f"{PROJECT}/{name}-rows:train", "method": "sft", "seed": seed,
                           "maxSeqLength": 256,
                           "hyperparams": {"lora": {"rank": 16, "alpha": 32},
                                           "optimizer": {"learningRate": rate},
                                           "training": {"maxSteps": steps, "batchSize": 8}}},
                "execution": {"deviceProfile": "cpu"}}
        answer = client.post("/v1/training/runs", json=plan)
        answer.raise_for_status()
        runs.append(answer.json()["runId"])
    models = []
    deadline = time.monotonic() + 900
    for run_id in runs:
        while True:
            run = client.get(f"/v1/training/runs/{run_id}").json()
            if run["terminal"]:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"run {run_id[:12]} did not end within 15 minutes (phase {run['phase']})")
            time.sleep(1)
        if run["phase"] != "COMPLETED":
            raise RuntimeError(f"run {run_id[:12]} ended {run['phase']}: {run.get('failureReason')}")
        models.append(run["results"]["model"])
    return models


def serve(url: str, client, adapters: list[str]) -> dict:
    """One endpoint: the first adapter's (which serves the base model too), the second attached; every model
    ready."""
    created = last_json(akka(url, "training", "endpoints", "create", "--model", adapters[0], "--wait",
                             "--timeout", "600", "-o", "json-compact"))
    for other in adapters[1:]:
        attached = last_json(akka(url, "training", "endpoints", "create", "--model", other, "-o", "json-compact"))
        if attached["endpointId"] != created["endpointId"]:
            raise RuntimeError(f"{other} got an endpoint of its own ({attached['endpointId'][:12]}), not attached")
    deadline = time.monotonic() + 300
    while True:
        endpoint = client.get(f"/v1/training/endpoints/{created['endpointId']}").json()
        if endpoint["terminal"]:
            raise RuntimeError(f"the endpoint is {endpoint['phase']}: {endpoint.get('failureReason')}")
        if endpoint["phase"] == "READY" and all(m["ready"] for m in endpoint["models"]):
            return endpoint
        if time.monotonic() > deadline:
            raise RuntimeError(f"the endpoint's models were not all ready within 300 s: {endpoint['models']}")
        time.sleep(0.5)


# --- the clients ------------------------------------------------------------------------------------------


async def one_request(http, body: dict, timeout: float) -> dict:
    """Send one chat completion; its outcome (ok, 429, failed, timeout), latency, time to first content and
    generated tokens."""
    import httpx

    started = time.monotonic()
    record = {"model": body["model"], "stream": body["stream"], "outcome": "failed", "latency": None,
              "firstContent": None, "tokens": 0, "status": None, "retryAfter": None, "error": None}
    try:
        async with asyncio.timeout(timeout):
            if not body["stream"]:
                answer = await http.post("/v1/chat/completions", json=body)
                record["status"] = answer.status_code
                if answer.status_code == 200:
                    record["tokens"] = answer.json()["usage"]["completion_tokens"]
                    record["outcome"] = "ok"
                else:
                    classify(record, answer.status_code, answer.headers, answer.text)
            else:
                async with http.stream("POST", "/v1/chat/completions", json=body) as answer:
                    record["status"] = answer.status_code
                    if answer.status_code != 200:
                        classify(record, answer.status_code, answer.headers, (await answer.aread()).decode())
                    else:
                        done, chunks, failure, usage = False, 0, None, None
                        async for line in answer.aiter_lines():
                            if not line.startswith("data: "):
                                continue
                            data = line[len("data: "):]
                            if data == "[DONE]":
                                done = True
                                continue
                            chunk = json.loads(data)
                            if chunk.get("error"):  # the endpoint ended the stream with OpenAI's error object
                                failure = chunk["error"]
                                continue
                            delta = (chunk.get("choices") or [{}])[0].get("delta") or {}
                            if delta.get("content"):
                                chunks += 1
                                if record["firstContent"] is None:
                                    record["firstContent"] = time.monotonic() - started
                            if chunk.get("usage"):  # a chunk of its own before [DONE] (include_usage)
                                usage = chunk["usage"]["completion_tokens"]
                        if failure is not None:
                            record["outcome"] = "timeout" if failure.get("code") == "request_timeout" else "failed"
                            record["error"] = f"error event: {failure.get('message')}"
                        elif done and usage is None:
                            record["error"] = "the stream carried no usage (stream_options.include_usage was sent)"
                        elif done:
                            record["outcome"], record["tokens"] = "ok", usage
                        else:
                            record["error"] = f"the stream ended without [DONE] after {chunks} chunks"
    except TimeoutError:
        record["outcome"] = "timeout"
    except (httpx.HTTPError, ValueError, KeyError) as error:
        record["error"] = f"{type(error).__name__}: {error}"
    record["latency"] = time.monotonic() - started
    return record


def classify(record: dict, status: int, headers, text: str) -> None:
    if status == 429:
        record["outcome"] = "429"
        try:
            record["retryAfter"] = float(headers.get("retry-after", "1"))
        except ValueError:
            record["retryAfter"] = 1.0
    else:  # 504: the endpoint cut the request at its own time limit
        record["outcome"] = "timeout" if status == 504 else "failed"
        record["error"] = f"HTTP {status}: {text[:300]}"


# the structured level's schema: an answer that goes on for max_tokens (a string), so the constrained answers are as
# long as the free ones and tokens/s compare like for like
STRUCTURED = {"type": "json_schema", "json_schema": {"name": "answer", "strict": True, "schema": {
    "type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"],
    "additionalProperties": False}}}


async def level(url: str, headers: dict, models: list[str], clients: int, seconds: float, max_tokens: int,
                timeout: float, requests: int | None = None, structured: bool = False) -> tuple[list[dict], float]:
    """`clients` clients, each sending one request after another for `seconds` (or until `requests` are sent);
    every request's record and the level's wall time (from its start to its last answer). `structured`: every
    request asks for a JSON answer of a schema (constrained decoding)."""
    import httpx

    counter = iter(range(10**9))
    records: list[dict] = []
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits,
                                 timeout=httpx.Timeout(timeout + 30, connect=30)) as http:
        started = time.monotonic()
        stop_at = started + seconds

        async def client() -> None:
            while time.monotonic() < stop_at:
                k = next(counter)
                if requests is not None and k >= requests:
                    return  # round robin over the models; within each, streamed and not in turn
                stream = (k // len(models)) % 2 == 1
                body = {"model": models[k % len(models)], "stream": stream,
                        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}],
                        "max_tokens": max_tokens, "temperature": 0,
                        **({"stream_options": {"include_usage": True}} if stream else {}),
                        **({"response_format": STRUCTURED} if structured else {})}
                record = await one_request(http, body, timeout)
                record["end"] = time.monotonic() - started
                records.append(record)
                if record["outcome"] == "429":
                    await asyncio.sleep(min(record["retryAfter"] or 1.0, max(0.0, stop_at - time.monotonic())))

        await asyncio.gather(*(client() for _ in range(clients)))
    return records, time.monotonic() - started


# --- figures --------------------------------------------------------------------------------------------


def percentile(values: list[float], share: float) -> float | None:
    """The nearest-rank percentile."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def figures(clients: int, records: list[dict], wall: float) -> dict:
    ok = [r for r in records if r["outcome"] == "ok"]
    latencies = [r["latency"] for r in ok]
    first = [r["firstContent"] for r in ok if r["stream"] and r["firstContent"] is not None]
    tokens = [r["tokens"] for r in ok]
    kinds = {}
    for model in sorted({r["model"] for r in ok}):
        for stream in (False, True):
            mine = [r for r in ok if r["model"] == model and r["stream"] is stream]
            if mine:
                kinds[f"{model} {'stream' if stream else 'whole'}"] = {
                    "requests": len(mine), "latencyP50": percentile([r["latency"] for r in mine], 0.5),
                    "tokensPerRequest": sum(r["tokens"] for r in mine) / len(mine)}
    errors = sorted({r["error"] for r in records if r["outcome"] in ("failed", "timeout") and r["error"]})
    return {"clients": clients, "wallSeconds": wall, "ok": len(ok),
            "told429": sum(r["outcome"] == "429" for r in records),
            "failed": sum(r["outcome"] == "failed" for r in records),
            "timedOut": sum(r["outcome"] == "timeout" for r in records),
            "requestsPerSecond": len(ok) / wall if wall > 0 else 0.0,
            "tokensPerSecond": sum(tokens) / wall if wall > 0 else 0.0,
            "tokensPerRequest": {"mean": sum(tokens) / len(tokens) if tokens else None,
                                 "min": min(tokens, default=None), "max": max(tokens, default=None)},
            "latencyP50": percentile(latencies, 0.50), "latencyP95": percentile(latencies, 0.95),
            "latencyMax": max(latencies, default=None),
            "firstContentP50": percentile(first, 0.50), "firstContentP95": percentile(first, 0.95),
            "byModelAndMode": kinds, "errors": errors[:10]}


def cpu_times() -> dict[int, tuple[int, float]]:
    """Every process's (parent, own cpu seconds), from /proc; empty where there is none."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    found = {}
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = entry.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        found[int(entry.parent.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
    return found


def cpu_split(before: dict, after: dict, server_pid: int) -> dict[str, float] | None:
    """Cpu seconds between two snapshots: this process (the clients), the server, the processes under the server
    (the endpoint's worker) and every other process on the machine (noise)."""
    if not after:
        return None
    parents = {pid: parent for pid, (parent, _) in {**before, **after}.items()}

    def under(pid: int, root: int) -> bool:
        while pid > 1:
            if pid == root:
                return True
            pid = parents.get(pid, 0)
        return False

    split = {"clients": 0.0, "server": 0.0, "worker": 0.0, "others": 0.0}
    for pid, (_, cpu) in after.items():
        used = cpu - before.get(pid, (0, 0.0))[1]
        if pid == os.getpid():
            split["clients"] += used
        elif pid == server_pid:
            split["server"] += used
        elif under(pid, server_pid):
            split["worker"] += used
        elif not under(pid, os.getpid()):
            split["others"] += used
    return split


def noise(row: dict) -> float | None:
    """The share of the machine's cpu time other processes used during a level."""
    used = row.get("cpuSeconds")
    if not used or not row["wallSeconds"]:
        return None
    return used["others"] / (row["wallSeconds"] * (os.cpu_count() or 1))


NOISY = 0.10  # more than this share of the machine used by other processes: the level's figures are disturbed


def seconds(value: float | None) -> str:
    return DASH if value is None else f"{value:.2f}"


def ratio(value: float | None, base: float | None) -> str:
    return DASH if value is None or not base else f"{value / base:.2f}x"


def print_table(rows: list[dict]) -> None:
    base = rows[0]
    say(f"\n{'clients':>7} {'ok':>5} {'429':>5} {'fail':>4} {'t/o':>4} {'req/s':>7} {'tok/s':>8} {'tok/req':>7} "
        f"{'p50 s':>6} {'p95 s':>6} {'ttft50':>6} {'tok/s ratio':>11} {'p95 ratio':>9} {'noise':>6}")
    for row in rows:
        mean = row["tokensPerRequest"]["mean"]
        say(f"{row['clients']:>7} {row['ok']:>5} {row['told429']:>5} {row['failed']:>4} {row['timedOut']:>4} "
            f"{row['requestsPerSecond']:>7.2f} {row['tokensPerSecond']:>8.1f} "
            f"{DASH if mean is None else f'{mean:.1f}':>7} {seconds(row['latencyP50']):>6} "
            f"{seconds(row['latencyP95']):>6} {seconds(row['firstContentP50']):>6} "
            f"{ratio(row['tokensPerSecond'], base['tokensPerSecond']):>11} "
            f"{ratio(row['latencyP95'], base['latencyP95']):>9} "
            f"{DASH if noise(row) is None else f'{noise(row):.0%}':>6}")
    say(f"(ratios against the {base['clients']}-client level; tok/req: generated tokens per answered request; "
        "ttft50: a streamed request's median time to its first content; noise: the share of the machine's cpu "
        "other processes used meanwhile)")


def print_targets(rows: list[dict]) -> dict:
    by_clients = {row["clients"]: row for row in rows}
    one, sixteen, many = by_clients.get(1), by_clients.get(16), by_clients.get(64)
    verdicts = {}
    say("\ntargets (2-core cpu)")
    if one and sixteen and one["tokensPerSecond"] and one["latencyP95"]:
        throughput = sixteen["tokensPerSecond"] / one["tokensPerSecond"]
        requests = sixteen["requestsPerSecond"] / one["requestsPerSecond"] if one["requestsPerSecond"] else None
        p95 = sixteen["latencyP95"] / one["latencyP95"] if sixteen["latencyP95"] is not None else None
        verdicts["throughput16"] = {"ratio": throughput, "requestsRatio": requests, "target": 4.0,
                                    "met": throughput >= 4.0}
        verdicts["p95at16"] = {"ratio": p95, "target": 3.0, "met": p95 is not None and p95 <= 3.0}
        say(f"  16 clients' tokens/s / one client's   {throughput:6.2f}x  (target >= 4x: "
            f"{'met' if throughput >= 4.0 else 'NOT met'}; requests/s {ratio(requests, 1.0)})")
        say(f"  16 clients' p95 / one client's p95     {DASH if p95 is None else f'{p95:6.2f}x'}  (target <= 3x: "
            f"{'met' if verdicts['p95at16']['met'] else 'NOT met'})")
    else:
        say("  16 vs one client: not measured (--levels needs 1 and 16)")
    if many:
        clean = many["failed"] == 0 and many["timedOut"] == 0
        verdicts["all64answered"] = {"ok": many["ok"], "told429": many["told429"], "failed": many["failed"],
                                     "timedOut": many["timedOut"], "met": clean}
        say(f"  64 clients: {many['ok']} answered, {many['told429']} told 429, {many['failed']} failed, "
            f"{many['timedOut']} timed out  (target: none fail or time out: {'met' if clean else 'NOT met'})")
    else:
        say("  64 clients: not measured (--levels needs 64)")
    disturbed = [row["clients"] for row in rows if (noise(row) or 0) > NOISY]
    if disturbed:
        say(f"  NOTE: other processes used more than {NOISY:.0%} of the machine during the level(s) of "
            f"{', '.join(map(str, disturbed))} client(s): their figures, and ratios taken from them, are disturbed; "
            "run again on a quiet machine")
    verdicts["disturbedLevels"] = disturbed
    return verdicts


# --- main -----------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="optimize/small-smollm2", help="base model (a stand-in serves offline)")
    parser.add_argument("--levels", default="1,4,16,64", help="concurrent clients per level, comma-separated")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long each level's clients send requests")
    parser.add_argument("--max-tokens", type=int, default=32, help="max_tokens of every request (temperature 0)")
    parser.add_argument("--timeout", type=float, default=120.0, help="a request not answered within this is a "
                                                                     "time-out")
    parser.add_argument("--steps", type=int, default=12, help="updates of each adapter's training run")
    parser.add_argument("--batch", type=int, help="OPTIMIZE_ENDPOINT_BATCH for the endpoint (default: its own, 16)")
    parser.add_argument("--queue", type=int, help="OPTIMIZE_ENDPOINT_QUEUE for the endpoint (default: its own, 64)")
    parser.add_argument("--threads", type=int, help="OMP_NUM_THREADS for the server and its workers (default: "
                                                    "torch's own, one per core)")
    parser.add_argument("--json", metavar="PATH", help="write the figures (and every request's record) here")
    parser.add_argument("--structured-clients", type=int, default=16,
                        help="the level run again with every request constrained to a JSON schema")
    args = parser.parse_args()
    levels = [int(item) for item in args.levels.split(",") if item.strip()]
    if not levels or min(levels) < 1:
        parser.error("--levels needs positive client counts, e.g. 1,4,16,64")

    import httpx

    env = dict(OFFLINE)
    if args.batch is not None:
        env["OPTIMIZE_ENDPOINT_BATCH"] = str(args.batch)
    if args.queue is not None:
        env["OPTIMIZE_ENDPOINT_QUEUE"] = str(args.queue)
    if args.threads is not None:
        env.update(OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    work = Path(tempfile.mkdtemp(prefix="serve-load-"))
    say(f"model {args.model}, levels {levels} clients, {args.seconds:g} s each, max_tokens {args.max_tokens}, "
        f"temperature 0, {os.cpu_count()} cpu(s); endpoint batch "
        f"{env.get('OPTIMIZE_ENDPOINT_BATCH', os.environ.get('OPTIMIZE_ENDPOINT_BATCH', 'default (16)'))}, queue "
        f"{env.get('OPTIMIZE_ENDPOINT_QUEUE', os.environ.get('OPTIMIZE_ENDPOINT_QUEUE', 'default (64)'))}, torch "
        f"threads {env.get('OMP_NUM_THREADS', os.environ.get('OMP_NUM_THREADS', 'default'))}")
    result: dict = {"model": args.model, "levels": [], "settings": vars(args), "cpus": os.cpu_count()}
    server = None
    try:
        began = time.monotonic()
        server, url = start_server(work / "data", env=env, seconds=60)
        token = (work / "data" / "admin-token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
            akka(url, "training", "base-models", "select", args.model)
            akka(url, "training", "projects", "create", PROJECT)
            say(f"server {url} up, {args.model} selected ({time.monotonic() - began:.0f} s); training two adapters, "
                f"{args.steps} updates each")
            adapters = train_adapters(url, client, args.model, work, args.steps)
            say(f"adapters {', '.join(adapters)} trained ({time.monotonic() - began:.0f} s); serving them")
            endpoint = serve(url, client, adapters)
            endpoint_id = endpoint["endpointId"]
            models = [m["name"] for m in endpoint["models"]]
            say(f"endpoint {endpoint_id[:12]} ready with {', '.join(models)} ({time.monotonic() - began:.0f} s)")
            result.update(endpoint=endpoint_id, models=models, adapters=adapters,
                          setupSeconds=time.monotonic() - began)

            warm, _ = asyncio.run(level(url, headers, models, 1, 600.0, args.max_tokens, args.timeout,
                                        requests=2 * len(models)))
            bad = [r for r in warm if r["outcome"] != "ok"]
            if bad:
                raise RuntimeError(f"a warm-up request was not answered: {bad[0]}")
            say(f"warm-up: {len(warm)} requests (every model, streamed and whole), "
                f"{sum(r['tokens'] for r in warm) / len(warm):.1f} tokens each, "
                f"{min(r['latency'] for r in warm):.2f}-{max(r['latency'] for r in warm):.2f} s")

            rows = []
            for clients in levels:
                before = cpu_times()
                records, wall = asyncio.run(level(url, headers, models, clients, args.seconds, args.max_tokens,
                                                  args.timeout))
                used = cpu_split(before, cpu_times(), server.pid)
                time.sleep(2.5)  # a heartbeat (at most 2 s apart) carries the worker's figures to the server
                load = client.get(f"/v1/training/endpoints/{endpoint_id}").json().get("load")
                row = {**figures(clients, records, wall), "cpuSeconds": used, "endpointLoad": load}
                rows.append(row)
                result["levels"].append({**row, "records": records})
                say(f"\n{clients} client(s): {row['ok']} answered, {row['told429']} told 429, {row['failed']} failed, "
                    f"{row['timedOut']} timed out in {wall:.1f} s; {row['requestsPerSecond']:.2f} req/s, "
                    f"{row['tokensPerSecond']:.1f} tok/s, p50 {seconds(row['latencyP50'])} s, "
                    f"p95 {seconds(row['latencyP95'])} s")
                tokens = row["tokensPerRequest"]
                if tokens["mean"] is not None and tokens["min"] != tokens["max"]:
                    say(f"  answers of {tokens['min']}-{tokens['max']} tokens (some stopped before max_tokens)")
                for kind, item in row["byModelAndMode"].items():
                    say(f"  {kind:<38} {item['requests']:>4} requests, p50 {seconds(item['latencyP50'])} s, "
                        f"{item['tokensPerRequest']:.1f} tokens each")
                for error in row["errors"]:
                    say(f"  failure: {error}")
                if (noise(row) or 0) > NOISY:
                    say(f"  NOTE: other processes used {noise(row):.0%} of the machine meanwhile: disturbed")
                if used is not None:
                    say(f"  cpu seconds: clients {used['clients']:.1f}, server {used['server']:.1f}, endpoint worker "
                        f"{used['worker']:.1f}, other processes {used['others']:.1f} "
                        f"(of {wall * (os.cpu_count() or 1):.0f} available)")
                if load:
                    say(f"  the endpoint's report (its last minute): served {load.get('served')}, in flight "
                        f"{load.get('inFlight')}, queued {load.get('queued')}, tokens {load.get('tokens')}, "
                        f"{load.get('tokensPerSecond')} tok/s, p50 {load.get('latencyP50Seconds')} s, "
                        f"p95 {load.get('latencyP95Seconds')} s")
                else:
                    say("  the endpoint reported no load")

            print_table(rows)
            result["targets"] = print_targets(rows)
            free = next((row for row in rows if row["clients"] == args.structured_clients), None)
            if free is not None:
                records, wall = asyncio.run(level(url, headers, models, args.structured_clients, args.seconds,
                                                  args.max_tokens, args.timeout, structured=True))
                constrained = figures(args.structured_clients, records, wall)
                cost = free["tokensPerSecond"] / constrained["tokensPerSecond"] \
                    if constrained["tokensPerSecond"] else None
                result["structured"] = {**constrained, "records": records, "costRatio": cost}
                say(f"\nstructured outputs ({args.structured_clients} clients, response_format json_schema): "
                    f"{constrained['ok']} answered, {constrained['failed']} failed, "
                    f"{constrained['tokensPerSecond']:.1f} tok/s against {free['tokensPerSecond']:.1f} free")
                say(f"  free tok/s / constrained tok/s      {DASH if cost is None else f'{cost:6.2f}x'}  (target <= "
                    f"1.3x: {'met' if cost is not None and cost <= 1.3 else 'NOT met'})")
            else:
                say(f"\nstructured outputs: not measured (--levels needs {args.structured_clients})")
            akka(url, "training", "endpoints", "delete", endpoint_id)
    except BaseException:
        log = work / "server.log"
        if log.exists():
            say(f"\nthe server's log, its end:\n{log.read_text(errors='replace')[-4000:]}")
        raise
    finally:
        if server is not None:
            stop_server(server)
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=2))
            say(f"\nfigures written to {args.json}")
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
