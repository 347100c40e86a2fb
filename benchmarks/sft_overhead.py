"""A supervised run through the platform against a bare TRL script doing the same training.

The same stand-in (`--model`, default optimize/small-smollm2), the same generated chat rows (support-ticket
triage like examples/datasets/support-chat.jsonl, a sixth of them with a tool call), the same hyperparameters
and the same number of updates are trained twice on the cpu:

(a) through the platform: a real server on the embedded defaults in a temporary data dir; the model is selected,
    the rows registered and analyzed and the project created with the `akka` CLI, then the run plan
    (execution.deviceProfile: cpu) is POSTed to /v1/training/runs and followed over its events stream;
(b) by a bare script in a subprocess (this file with `--bare SPEC`): the rows rendered and masked with
    `optimize.chat.render.ChatRenderer` exactly as the run worker's `_prepare` does (the registry's row rule,
    the default loss policy, labels -100 where no token trains, written to Parquet and memory-mapped), then
    TRL's SFTTrainer with a PEFT LoRA adapter under the engine's SFTConfig: rank, alpha, dropout, all-linear
    targets, learning rate, batch size, max_steps, seed, fp32, no gradient checkpointing, sdpa attention,
    logging_steps=1, a save every `--save-every` updates (optimizer and scheduler state included).

The platform puts the random state back after its start check reads the first batch, so both runs draw the same
random numbers: they log the same tokens and the same loss at every update, which the output checks. (TRL's
SFTConfig turns bf16 autocast on by default, on the cpu too; the bare script sets it off.)

It prints both training-phase times — the platform's `cost.duration.training` (the TRAINING phase: the updates,
per-step reporting, saves and their uploads, the result) and `cost.trainingSeconds` (the engine's own clock
around the updates), the bare script's wall time around `trainer.train()` — their ratios, and the time from
submission to the first update: `timing.phaseMillis` QUEUED + PREPARING (the server's clock) and, by following,
the POST to the first status in TRAINING and to the first status that reports a finished update. Both runs
use every core, so another job on the machine slows whichever run it meets: each pair also prints the cpu
seconds other processes used meanwhile, and `--repeat N` runs N pairs and adds medians and the fastest of each.

    .venv/bin/python benchmarks/sft_overhead.py [--model optimize/small-smollm2] [--rows 320] [--steps 40]
                                                [--save-every 10] [--max-seq-length 512] [--repeat 1]

Targets: platform/bare training time at most 1.10; submission to the first update at most 20 s.
"""

from __future__ import annotations

import argparse
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
import urllib.request
from pathlib import Path

AKKA = [sys.executable, "-m", "optimize"]
HYPERPARAMS = {"lora": {"rank": 16, "alpha": 32, "dropout": 0.05, "targets": "all-linear"},
               "optimizer": {"learningRate": 0.002}, "training": {"batchSize": 8}}
SEED = 0
WORKER_ENV = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "CUDA_VISIBLE_DEVICES": ""}

SYSTEM = 'You triage support tickets. Answer with JSON: {"category": ..., "urgent": true|false}.'
PRODUCTS = ["keyboard", "camera", "router", "laptop", "printer", "monitor", "headset", "phone", "tablet", "speaker"]
ISSUES = [("keeps disconnecting", "connectivity", False), ("drops the wifi every hour", "connectivity", True),
          ("shows an error light", "hardware", False), ("will not turn on", "hardware", True),
          ("makes a buzzing noise", "hardware", False), ("arrived damaged", "shipping", True),
          ("never arrived", "shipping", True), ("was charged twice", "billing", True),
          ("came with the wrong invoice", "billing", False), ("needs a firmware update", "software", False)]
TOOLS = [{"type": "function", "function": {"name": "lookup_order", "description": "Find an order by its number",
                                           "parameters": {"type": "object", "properties": {"order": {"type": "string"}},
                                                          "required": ["order"]}}}]


def make_rows(count: int) -> list[dict]:
    """Support-ticket triage rows; every sixth looks the order up with a tool call before answering."""
    rnd = random.Random(SEED)
    rows = []
    for index in range(count):
        product = rnd.choice(PRODUCTS)
        issue, category, urgent = rnd.choice(ISSUES)
        order = str(1000 + index)
        answer = {"role": "assistant", "content": json.dumps({"category": category, "urgent": urgent})}
        messages = [{"role": "system", "content": SYSTEM},
                    {"role": "user", "content": f"My {product} {issue}. Order #{order}."}]
        if index % 6 == 5:
            call = {"id": f"call_{index}", "type": "function",
                    "function": {"name": "lookup_order", "arguments": {"order": order}}}
            status = rnd.choice(["delivered", "in transit", "returned"])
            messages += [{"role": "assistant", "content": "Let me look up that order.", "tool_calls": [call]},
                         {"role": "tool", "tool_call_id": call["id"],
                          "content": json.dumps({"order": order, "status": status})}]
            rows.append({"messages": [*messages, answer], "tools": TOOLS})
        else:
            rows.append({"messages": [*messages, answer]})
    return rows


def cpu_snapshot() -> dict[int, tuple[int, float]]:
    """Every process's (parent, cpu seconds with its reaped children's), from /proc; empty where there is none."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    found = {}
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = entry.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        found[int(entry.parent.name)] = (int(fields[1]), sum(int(f) for f in fields[11:15]) / tick)
    return found


def other_cpu(before: dict[int, tuple[int, float]], after: dict[int, tuple[int, float]]) -> float | None:
    """Cpu seconds that processes outside this benchmark's own tree used between two snapshots: the noise left
    on a shared machine (0 on a quiet one). Processes that ended unreaped in between are not seen."""
    if not after:
        return None
    parents = {pid: parent for pid, (parent, _) in {**before, **after}.items()}

    def ours(pid: int) -> bool:
        while pid > 1:
            if pid == os.getpid():
                return True
            pid = parents.get(pid, 0)
        return False

    return sum(cpu - before.get(pid, (0, 0.0))[1] for pid, (_, cpu) in after.items() if not ours(pid))


# --- (a) the platform ---------------------------------------------------------------------------------------


def akka(url: str, *args: str) -> str:
    done = subprocess.run([*AKKA, *args], env={**os.environ, "OPTIMIZE_URL": url}, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"akka {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def start_server(data_dir: Path) -> tuple[subprocess.Popen, str]:
    server = subprocess.Popen([*AKKA, "server", "start", "--port", "0", "--data-dir", str(data_dir)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit(f"the server exited with {server.returncode}")
        if (data_dir / "server.json").exists():
            url = json.loads((data_dir / "server.json").read_text())["url"]
            try:
                with urllib.request.urlopen(f"{url}/v1/health", timeout=2):
                    return server, url
            except OSError:
                pass
        time.sleep(0.1)
    sys.exit("the server did not start within 60 s")


def stop_server(server: subprocess.Popen) -> None:
    server.send_signal(signal.SIGTERM)
    try:
        server.wait(20)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def platform_setup(url: str, model: str, rows_file: Path) -> dict:
    """Select the model, register the rows, create the project (the CLI); the model block the worker gets."""
    akka(url, "training", "base-models", "select", model)
    akka(url, "registry", "datasets", "register", "bench/chat", "-f", str(rows_file), "--alias", "train")
    akka(url, "training", "projects", "create", "bench")
    # Analyzed first, as a user does before training: otherwise the run's length check waits for the analysis
    # in QUEUED, and the time to the first update would count it.
    akka(url, "training", "datasets", "analyze", "bench/chat:train", "--model", model, "--wait")
    entry = json.loads(akka(url, "training", "base-models", "get", model, "-o", "json"))
    return {"id": entry["id"], "family": entry["family"], "path": entry["selection"]["path"],
            "chatTemplate": entry["chatTemplate"]}


def platform_run(url: str, model: str, steps: int, save_every: int, max_seq_length: int) -> dict:
    """POST the run plan and follow the run's events to its end; the run as `runs get -o json` shows it."""
    from optimize.client.credentials import find_token
    from optimize.client.events import follow
    from optimize.client.http import OptimizeClient

    plan = {
        "kind": "run", "project": "bench", "baseModel": model, "modelName": "sft-overhead",
        "config": {"dataset": "bench/chat:train", "method": "sft", "seed": SEED, "maxSeqLength": max_seq_length,
                   "hyperparams": {**HYPERPARAMS, "training": {**HYPERPARAMS["training"], "maxSteps": steps}},
                   "model": {"precision": "fp32", "gradientCheckpointing": False}},
        "execution": {"deviceProfile": "cpu", "saveEvery": save_every},
    }
    with OptimizeClient(url, token=find_token(url)) as client:  # the local server's own admin token
        before = cpu_snapshot()
        posted = time.monotonic()
        run = client.post("/v1/training/runs", json=plan)
        first_training = first_update = None
        for status in follow(client, f"/v1/training/runs/{run['runId']}/events"):
            now = time.monotonic() - posted
            if first_training is None and status["phase"] == "TRAINING":
                first_training = now
            if first_update is None and (status.get("progress") or {}).get("observedStep", 0) >= 1:
                first_update = now
        followed = time.monotonic() - posted
        others = other_cpu(before, cpu_snapshot())
        final = client.get(f"/v1/training/runs/{run['runId']}")
        logged = [item for item in client.get(f"/v1/training/runs/{run['runId']}/metrics")["steps"]
                  if item["kind"] == "train" and item.get("loss") is not None]
    if final["phase"] != "COMPLETED":
        sys.exit(f"the platform run ended {final['phase']}: {final.get('failureReason')}")
    return {"run": final, "firstTraining": first_training, "firstUpdate": first_update, "followed": followed,
            "otherCpu": others,
            "losses": [item["loss"] for item in logged], "tokens": [item.get("tokens") for item in logged]}


# --- (b) the bare script --------------------------------------------------------------------------------------


def bare(spec_file: str) -> None:
    """The bare TRL run (in its own process): render like the worker, then SFTTrainer with the engine's settings."""
    spec = json.loads(Path(spec_file).read_text())
    started = time.monotonic()
    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    from optimize.chat.families import template_kwargs
    from optimize.chat.render import ChatRenderer, LossPolicy
    from optimize.chat.rows import RowKind, check_row

    imported = time.monotonic()
    model, work = spec["model"], Path(spec["workdir"])
    corrected = model["family"] if model["chatTemplate"] == "corrected" else None
    renderer = ChatRenderer.from_pretrained(model["path"], template_kwargs(model["family"]), corrected_family=corrected)
    policy = LossPolicy("final", True, None)
    columns: dict[str, list] = {"input_ids": [], "labels": []}
    with open(spec["rows"], "rb") as handle:
        for raw in handle:
            row = json.loads(raw)
            check_row(row, RowKind.CHAT)
            rendered = renderer.render(row, policy)
            if len(rendered.input_ids) > spec["maxSeqLength"]:
                sys.exit(f"a row is {len(rendered.input_ids)} tokens long, over {spec['maxSeqLength']}")
            columns["input_ids"].append(rendered.input_ids)
            columns["labels"].append([t if m else -100
                                      for t, m in zip(rendered.input_ids, rendered.loss_mask, strict=True)])
    schema = pa.schema([("input_ids", pa.list_(pa.int32())), ("labels", pa.list_(pa.int32()))])
    pq.write_table(pa.table(columns, schema=schema), work / "train.parquet")
    rendered_at = time.monotonic()

    lora, loop = HYPERPARAMS["lora"], HYPERPARAMS["training"]
    args = SFTConfig(
        output_dir=str(work / "out"), max_steps=spec["steps"], per_device_train_batch_size=loop["batchSize"],
        gradient_accumulation_steps=1, learning_rate=HYPERPARAMS["optimizer"]["learningRate"], weight_decay=0.0,
        warmup_steps=0, lr_scheduler_type="linear", seed=SEED, data_seed=SEED, logging_steps=1,
        save_strategy="steps", save_steps=spec["saveEvery"], save_only_model=False, eval_strategy="no",
        bf16=False, fp16=False,  # TRL's SFTConfig turns bf16 on by default, on the cpu too: fp32 as the run trains
        use_cpu=True, gradient_checkpointing=False, report_to="none", max_length=spec["maxSeqLength"],
        dataset_kwargs={"skip_prepare_dataset": True}, remove_unused_columns=False, disable_tqdm=True,
        dataloader_num_workers=0,
    )
    losses: list[float] = []
    tokens: list[float] = []
    clock = {"begin": 0.0}

    class Record(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            clock["begin"] = time.monotonic()

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                losses.append(float(logs["loss"]))
                tokens.append(logs.get("num_tokens"))

    trainer = SFTTrainer(
        model=AutoModelForCausalLM.from_pretrained(model["path"], dtype=torch.float32, attn_implementation="sdpa"),
        args=args, processing_class=AutoTokenizer.from_pretrained(model["path"]),
        peft_config=LoraConfig(r=lora["rank"], lora_alpha=lora["alpha"], lora_dropout=lora["dropout"],
                               target_modules=lora["targets"], task_type="CAUSAL_LM"),
        train_dataset=Dataset.from_parquet(str(work / "train.parquet"), cache_dir=str(work / "arrow")),
        callbacks=[Record()],
    )
    ready = time.monotonic()
    trainer.train()
    ended = time.monotonic()
    print("RESULT " + json.dumps({"trainSeconds": ended - ready, "fromBeginSeconds": ended - clock["begin"],
                                  "importSeconds": imported - started, "renderSeconds": rendered_at - imported,
                                  "setupSeconds": ready - rendered_at, "losses": losses, "tokens": tokens,
                                  "saves": len(list((work / "out").glob("checkpoint-*")))}), flush=True)


def bare_run(model: dict, rows_file: Path, steps: int, save_every: int, max_seq_length: int, work: Path) -> dict:
    spec = work / "bare.json"
    spec.write_text(json.dumps({"model": model, "rows": str(rows_file), "steps": steps, "saveEvery": save_every,
                                "maxSeqLength": max_seq_length, "workdir": str(work)}))
    before = cpu_snapshot()
    started = time.monotonic()
    done = subprocess.run([sys.executable, __file__, "--bare", str(spec)], capture_output=True, text=True,
                          env={**os.environ, **WORKER_ENV})
    others = other_cpu(before, cpu_snapshot())
    if done.returncode != 0:
        sys.exit(f"the bare script failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
    return {**json.loads(line[len("RESULT "):]), "processSeconds": time.monotonic() - started, "otherCpu": others}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="optimize/small-smollm2", help="base model (a stand-in trains offline)")
    parser.add_argument("--rows", type=int, default=320, help="generated chat rows")
    parser.add_argument("--steps", type=int, default=40, help="updates (maxSteps) in both runs")
    parser.add_argument("--save-every", type=int, default=10, help="a save every this many updates in both runs")
    parser.add_argument("--max-seq-length", type=int, default=512, help="maxSeqLength; must hold every row")
    parser.add_argument("--repeat", type=int, default=1, help="pairs (platform, then bare) to run; medians are shown")
    parser.add_argument("--bare", metavar="SPEC", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare:
        bare(args.bare)
        return

    work = Path(tempfile.mkdtemp(prefix="sft-overhead-"))
    rows_file = work / "chat.jsonl"
    rows_file.write_text("".join(json.dumps(row) + "\n" for row in make_rows(args.rows)))
    print(f"{args.rows} chat rows, {args.steps} updates of batch {HYPERPARAMS['training']['batchSize']}, "
          f"a save every {args.save_every}, model {args.model}, {os.cpu_count()} cpu(s), {args.repeat} pair(s)",
          flush=True)
    pairs = []
    try:
        server, url = start_server(work / "data")  # idle while the bare script trains (a few ms of cpu a second)
        try:
            model = platform_setup(url, args.model, rows_file)
            for index in range(args.repeat):
                platform = platform_run(url, args.model, args.steps, args.save_every, args.max_seq_length)
                (work / f"bare-{index}").mkdir()
                plain = bare_run(model, rows_file, args.steps, args.save_every, args.max_seq_length,
                                 work / f"bare-{index}")
                pairs.append((platform, plain))
                report(index, platform, plain)
        finally:
            stop_server(server)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.repeat > 1:
        middle = statistics.median
        print(f"\nmedians of {args.repeat} pairs")
        print(f"  TRAINING phase {middle(p['run']['cost']['duration']['training'] for p, _ in pairs):.2f} s, "
              f"engine clock {middle(p['run']['cost']['trainingSeconds'] for p, _ in pairs):.2f} s; "
              f"bare trainer.train() {middle(b['trainSeconds'] for _, b in pairs):.2f} s")
        print(f"  ratio TRAINING phase / trainer.train() "
              f"{middle(p['run']['cost']['duration']['training'] / b['trainSeconds'] for p, b in pairs):.3f} "
              f"(target ≤ 1.10); engine clock / from on_train_begin "
              f"{middle(p['run']['cost']['trainingSeconds'] / b['fromBeginSeconds'] for p, b in pairs):.3f}")
        fastest = min(p["run"]["cost"]["duration"]["training"] for p, _ in pairs)
        print(f"  fastest of each: TRAINING phase {fastest:.2f} s, trainer.train() "
              f"{min(b['trainSeconds'] for _, b in pairs):.2f} s, ratio "
              f"{fastest / min(b['trainSeconds'] for _, b in pairs):.3f} (the least disturbed by other processes)")
        print(f"  submission to the first update: QUEUED + PREPARING "
              f"{middle(to_first_update(p['run']) for p, _ in pairs):.2f} s, followed to the first update reported "
              f"{middle(p['firstUpdate'] for p, _ in pairs):.2f} s (target ≤ 20 s)")


def to_first_update(run: dict) -> float:
    phases = run["timing"]["phaseMillis"]
    return (phases.get("QUEUED", 0) + phases.get("PREPARING", 0)) / 1000


def report(index: int, platform: dict, plain: dict) -> None:
    run = platform["run"]
    cost, phases = run["cost"], run["timing"]["phaseMillis"]
    phase_training, engine_training = cost["duration"]["training"], cost["trainingSeconds"]
    same = len(platform["losses"]) == len(plain["losses"]) and all(
        abs(a - b) <= 1e-4 * max(1.0, abs(b)) for a, b in zip(platform["losses"], plain["losses"], strict=True))
    print(f"\n[pair {index + 1}] platform run {run['runId'][:12]}: {run['results']['steps']} updates, "
          f"{run['results']['tokens']} tokens, loss {platform['losses'][0]:.4f} → {platform['losses'][-1]:.4f}")
    print(f"  TRAINING phase (cost.duration.training)   {phase_training:7.2f} s")
    print(f"  engine clock (cost.trainingSeconds)       {engine_training:7.2f} s")
    print(f"  start check                               {run['checks']['seconds']:7.2f} s (in PREPARING)")
    print(f"bare TRL: loss {plain['losses'][0]:.4f} → {plain['losses'][-1]:.4f}, {plain['saves']} saves; "
          f"imports {plain['importSeconds']:.1f} s, rendering {plain['renderSeconds']:.1f} s, "
          f"model + trainer {plain['setupSeconds']:.1f} s")
    print(f"  wall time around trainer.train()          {plain['trainSeconds']:7.2f} s")
    print(f"  from on_train_begin                       {plain['fromBeginSeconds']:7.2f} s")
    same_rows = platform["tokens"] == plain["tokens"]
    print(f"  same rows in the same order (tokens per update)   {'yes' if same_rows else 'no'}")
    print(f"  the same losses, update for update (within 1e-4)  {'yes' if same else 'no'}")
    print(f"ratio platform/bare: TRAINING phase / trainer.train() {phase_training / plain['trainSeconds']:.3f} "
          f"(target ≤ 1.10); engine clock / from on_train_begin {engine_training / plain['fromBeginSeconds']:.3f}")
    print("submission to the first update (target ≤ 20 s):")
    print(f"  phaseMillis QUEUED + PREPARING            {to_first_update(run):7.2f} s "
          f"(QUEUED {phases.get('QUEUED', 0) / 1000:.2f}, PREPARING {phases.get('PREPARING', 0) / 1000:.2f})")
    print(f"  followed: the POST to the first TRAINING status          {platform['firstTraining']:6.2f} s")
    print(f"  followed: the POST to the first finished update reported {platform['firstUpdate']:6.2f} s")
    print(f"  followed: the POST to the run's end                      {platform['followed']:6.2f} s "
          f"(the bare process, start to end: {plain['processSeconds']:.2f} s)")
    if platform["otherCpu"] is not None:
        print(f"noise: other processes on this machine used {platform['otherCpu']:.1f} cpu-s during the platform run "
              f"and {plain['otherCpu']:.1f} cpu-s during the bare one (about 1 on a quiet 2-core machine; much more "
              "means another job shared the cores and the ratio is noise)", flush=True)


if __name__ == "__main__":
    main()
