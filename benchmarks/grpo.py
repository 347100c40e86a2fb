"""A GRPO run through the platform against a bare TRL GRPOTrainer script doing the same training.

The same stand-in (`--model`, default optimize/tiny-llama-3.2), the same generated question prompts, the same
reward (a completion that starts with a vowel scores 1: the regex term `^\\W*[aeiouAEIOU]`), the same rollout
settings and the same number of updates are trained twice on the cpu:

(a) through the platform: a real server on the embedded defaults in a temporary data dir; the model is selected,
    the rows registered and analyzed and the project created with the `akka` CLI, then the run plan
    (method grpo, execution.deviceProfile: cpu) is POSTed to /v1/training/runs and followed over its events
    stream;
(b) by a bare script in a subprocess (this file with `--bare SPEC`): each row's messages before its final answer
    rendered with `optimize.chat.render.ChatRenderer` and the generation prompt, as the run worker's
    `PromptFitter` does, then TRL's GRPOTrainer — tokenizing the rendered text without adding special tokens and
    drawing epoch N's prompt order from the seed and N, as the engine's subclass does — with a PEFT LoRA adapter
    under the engine's GRPOConfig: rank 8, alpha 16, dropout 0.05, all-linear targets, the learning rate,
    batchSize × generations completions an update, beta 0.04, the generations, completion length and
    temperature, token-level importance sampling, seed, fp32, no gradient checkpointing, sdpa attention,
    logging_steps=1, one save at the end; the reward a plain Python function with the same regex.

GRPO's rollouts are sampled, so both runs only see the same completions when they draw the same random numbers;
the output says whether they do (the reward and loss of every update compared, and the mean reward over the
first and the last updates of each).

It prints both training-phase times — the platform's `cost.duration.training` (the TRAINING phase: the updates,
per-step reporting, the save and its upload, the result) and `cost.trainingSeconds` (the engine's own clock
around the updates), the bare script's wall time around `trainer.train()` — their ratios, and the time per
update: the bare script's own (a callback's clock at every update's end) and the platform's (its engine clock
over the updates, and the updates as the events stream reports them). Both runs use every core, so another job
on the machine slows whichever run it meets: each pair also prints the cpu seconds other processes used
meanwhile, and `--repeat N` runs N pairs and adds medians and the fastest of each.

    .venv/bin/python benchmarks/grpo.py [--model optimize/tiny-llama-3.2] [--rows 64] [--steps 120]
                                        [--batch-size 4] [--generations 8] [--max-completion-length 16]
                                        [--repeat 1]

Target: platform/bare training time at most 1.10 on the cpu.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The server, the CLI and the noise figure exactly as the supervised benchmark next to this file has them
from sft_overhead import akka, cpu_snapshot, other_cpu, start_server, stop_server

SEED = 0
LEARNING_RATE = 0.05
TEMPERATURE = 0.7
KL_BETA = 0.04  # the platform's default klBeta, omitted from the plan
LORA = {"rank": 8, "alpha": 16, "dropout": 0.05, "targets": "all-linear"}  # rlHyperparams.lora's defaults
VOWEL = r"^\W*[aeiouAEIOU]"
MAX_SEQ_LENGTH = 256
WORKER_ENV = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "CUDA_VISIBLE_DEVICES": ""}

THINGS = ["sky", "grass", "snow", "fire", "sea", "sun", "moon", "night", "ice", "sand", "rain", "wind",
          "lemon", "coal", "milk", "stone"]
ASKS = [("Is the {} {}?", ["blue", "green", "cold", "hot", "wet", "dry", "bright", "dark"]),
        ("Can the {} be {}?", ["red", "soft", "loud", "sweet"]), ("Why is the {} {}?", ["old", "white"])]


def make_rows(count: int) -> list[dict]:
    """Short yes/no questions as chat rows ending with an answer (the prompt is the messages before it)."""
    rnd = random.Random(SEED)
    questions = sorted({form.format(thing, word) for form, words in ASKS for thing in THINGS for word in words})
    rnd.shuffle(questions)
    rows = []
    for index in range(count):
        question = questions[index % len(questions)]
        answer = rnd.choice(["Yes.", "No.", "Often.", "Only at night.", "It depends."])
        rows.append({"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]})
    return rows


def grpo_settings(args: argparse.Namespace) -> dict:
    return {"steps": args.steps, "batchSize": args.batch_size, "generations": args.generations,
            "maxCompletionLength": args.max_completion_length}


# --- (a) the platform ---------------------------------------------------------------------------------------


def platform_setup(url: str, model: str, rows_file: Path) -> dict:
    """Select the model, register the rows, create the project (the CLI); the model block the worker gets."""
    akka(url, "training", "base-models", "select", model)
    akka(url, "registry", "datasets", "register", "bench/prompts", "-f", str(rows_file), "--alias", "train")
    akka(url, "training", "projects", "create", "bench")
    # Analyzed first, as a user does before training: otherwise the run's length check waits for it in QUEUED
    akka(url, "training", "datasets", "analyze", "bench/prompts:train", "--model", model, "--wait")
    entry = json.loads(akka(url, "training", "base-models", "get", model, "-o", "json"))
    return {"id": entry["id"], "family": entry["family"], "path": entry["selection"]["path"],
            "chatTemplate": entry["chatTemplate"]}


def platform_run(url: str, token: str, model: str, grpo: dict) -> dict:
    """POST the run plan (with the admin token) and follow the run's events to its end; the run as `runs get -o json`
    shows it."""
    from optimize.client.events import follow
    from optimize.client.http import OptimizeClient

    plan = {
        "kind": "run", "project": "bench", "baseModel": model,
        "config": {"dataset": "bench/prompts:train", "method": "grpo", "maxSeqLength": MAX_SEQ_LENGTH, "seed": SEED,
                   "rlHyperparams": {"optimizer": {"learningRate": LEARNING_RATE},
                                     "maxCompletionLength": grpo["maxCompletionLength"],
                                     "generations": grpo["generations"], "temperature": TEMPERATURE,
                                     "training": {"maxSteps": grpo["steps"], "batchSize": grpo["batchSize"]}},
                   "reward": {"terms": [{"kind": "regex", "pattern": VOWEL, "name": "vowel"}]}},
        "execution": {"deviceProfile": "cpu"},
    }
    seen: list[tuple[int, float]] = []  # (update, seconds after the POST) as the events stream first reports it
    with OptimizeClient(url, token=token) as client:
        before = cpu_snapshot()
        posted = time.monotonic()
        run = client.post("/v1/training/runs", json=plan)
        try:
            for status in follow(client, f"/v1/training/runs/{run['runId']}/events"):
                step = (status.get("progress") or {}).get("observedStep") or 0
                if status["phase"] == "TRAINING" and step > (seen[-1][0] if seen else 0):
                    seen.append((step, time.monotonic() - posted))
        except BaseException:  # interrupted: the worker has its own session and would outlive the server
            client.post(f"/v1/training/runs/{run['runId']}/cancel")
            raise
        followed = time.monotonic() - posted
        others = other_cpu(before, cpu_snapshot())
        final = client.get(f"/v1/training/runs/{run['runId']}")
        logged = [item for item in client.get(f"/v1/training/runs/{run['runId']}/metrics")["steps"]
                  if item["kind"] == "train" and item.get("reward") is not None]
    if final["phase"] != "COMPLETED":
        sys.exit(f"the platform run ended {final['phase']}: {final.get('failureReason')}")
    return {"run": final, "seen": seen, "followed": followed, "otherCpu": others,
            "rewards": [item["reward"] for item in logged], "losses": [item.get("loss") for item in logged]}


# --- (b) the bare script --------------------------------------------------------------------------------------


def bare(spec_file: str) -> None:
    """The bare TRL run (in its own process): prompts rendered like the worker's, then GRPOTrainer with the engine's
    settings and a plain regex reward."""
    spec = json.loads(Path(spec_file).read_text())
    started = time.monotonic()
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    from trl.trainer.utils import RepeatSampler

    from optimize.chat.families import template_kwargs
    from optimize.chat.normalize import normalize_messages
    from optimize.chat.render import ChatRenderer

    imported = time.monotonic()
    model, work, grpo = spec["model"], Path(spec["workdir"]), spec["grpo"]
    corrected = model["family"] if model["chatTemplate"] == "corrected" else None
    renderer = ChatRenderer.from_pretrained(model["path"], template_kwargs(model["family"]), corrected_family=corrected)
    with open(spec["rows"], "rb") as handle:
        prompts = [renderer.text(normalize_messages(json.loads(raw)["messages"])[:-1], None, generation_prompt=True)
                   for raw in handle]
    rendered_at = time.monotonic()

    pattern = re.compile(VOWEL)

    def vowel(prompts, completions, **_):
        return [1.0 if pattern.search(text) else 0.0 for text in completions]

    class EpochOrder(RepeatSampler):
        """The platform's prompt order: epoch N's drawn from (seed, N), where TRL's sampler draws every epoch's from
        one generator (the same first epoch, other orders after it). Costs nothing; only the rows differ."""

        def set_epoch(self, epoch: int) -> None:
            self.generator.manual_seed(SEED * 1_000_003 + int(epoch))

    class RenderedPrompts(GRPOTrainer):
        def _tokenize_prompts(self, prompts):
            return self.processing_class(text=prompts, add_special_tokens=False)["input_ids"], None, {}

        def _get_train_sampler(self, dataset=None):
            sampler = super()._get_train_sampler(dataset)
            sampler.__class__ = EpochOrder
            return sampler

    completions = grpo["batchSize"] * grpo["generations"]
    args = GRPOConfig(
        output_dir=str(work / "out"), max_steps=grpo["steps"], per_device_train_batch_size=completions,
        per_device_eval_batch_size=completions, gradient_accumulation_steps=1, learning_rate=LEARNING_RATE,
        weight_decay=0.0, warmup_steps=0, lr_scheduler_type="linear", seed=SEED, data_seed=SEED, logging_steps=1,
        save_strategy="steps", save_steps=grpo["steps"], save_only_model=False, eval_strategy="no",
        bf16=False, fp16=False, use_cpu=True, gradient_checkpointing=False, report_to="none",
        remove_unused_columns=False, disable_tqdm=True, dataloader_num_workers=0,
        beta=KL_BETA, num_generations=grpo["generations"], max_completion_length=grpo["maxCompletionLength"],
        temperature=TEMPERATURE, importance_sampling_level="token", reward_weights=[1.0],
        multi_objective_aggregation="sum_then_normalize", shuffle_dataset=True,
    )
    rewards: list[float] = []
    losses: list[float] = []
    clock: dict[str, list[float]] = {"begin": [], "ends": []}

    class Record(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            clock["begin"].append(time.monotonic())

        def on_step_end(self, args, state, control, **kwargs):
            clock["ends"].append(time.monotonic())

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "reward" in logs:
                rewards.append(float(logs["reward"]))
                losses.append(float(logs["loss"]))

    tokenizer = AutoTokenizer.from_pretrained(model["path"])
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    trainer = RenderedPrompts(
        model=AutoModelForCausalLM.from_pretrained(model["path"], dtype=torch.float32, attn_implementation="sdpa"),
        args=args, processing_class=tokenizer, reward_funcs=[vowel],
        peft_config=LoraConfig(r=LORA["rank"], lora_alpha=LORA["alpha"], lora_dropout=LORA["dropout"],
                               target_modules=LORA["targets"], task_type="CAUSAL_LM"),
        train_dataset=Dataset.from_dict({"prompt": prompts}), callbacks=[Record()],
    )
    ready = time.monotonic()
    trainer.train()
    ended = time.monotonic()
    begin = clock["begin"][0]
    updates = [b - a for a, b in zip([begin, *clock["ends"]], clock["ends"], strict=False)]
    print("RESULT " + json.dumps({"trainSeconds": ended - ready, "fromBeginSeconds": ended - begin,
                                  "importSeconds": imported - started, "renderSeconds": rendered_at - imported,
                                  "setupSeconds": ready - rendered_at, "updates": updates, "rewards": rewards,
                                  "losses": losses, "saves": len(list((work / "out").glob("checkpoint-*")))}),
          flush=True)


def bare_run(model: dict, rows_file: Path, grpo: dict, work: Path) -> dict:
    spec = work / "bare.json"
    spec.write_text(json.dumps({"model": model, "rows": str(rows_file), "grpo": grpo, "workdir": str(work)}))
    before = cpu_snapshot()
    started = time.monotonic()
    done = subprocess.run([sys.executable, __file__, "--bare", str(spec)], capture_output=True, text=True,
                          env={**os.environ, **WORKER_ENV})
    others = other_cpu(before, cpu_snapshot())
    if done.returncode != 0:
        sys.exit(f"the bare script failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
    return {**json.loads(line[len("RESULT "):]), "processSeconds": time.monotonic() - started, "otherCpu": others}


# --- the figures ------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="optimize/tiny-llama-3.2", help="base model (a stand-in trains offline)")
    parser.add_argument("--rows", type=int, default=64, help="generated question prompts")
    parser.add_argument("--steps", type=int, default=120, help="updates (maxSteps) in both runs")
    parser.add_argument("--batch-size", type=int, default=4, help="prompts an update (rlHyperparams batchSize)")
    parser.add_argument("--generations", type=int, default=8, help="completions sampled per prompt")
    parser.add_argument("--max-completion-length", type=int, default=16, help="longest completion, tokens")
    parser.add_argument("--repeat", type=int, default=1, help="pairs (platform, then bare) to run; medians are shown")
    parser.add_argument("--bare", metavar="SPEC", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare:
        bare(args.bare)
        return

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the run and the server when told to end
    grpo = grpo_settings(args)
    work = Path(tempfile.mkdtemp(prefix="grpo-overhead-"))
    rows_file = work / "prompts.jsonl"
    rows_file.write_text("".join(json.dumps(row) + "\n" for row in make_rows(args.rows)))
    print(f"{args.rows} question prompts, {args.steps} updates of {args.batch_size} prompts × {args.generations} "
          f"completions of up to {args.max_completion_length} tokens, model {args.model}, {os.cpu_count()} cpu(s), "
          f"{args.repeat} pair(s)", flush=True)
    pairs = []
    try:
        server, url = start_server(work / "data")  # idle while the bare script trains (a few ms of cpu a second)
        try:
            model = platform_setup(url, args.model, rows_file)
            token = (work / "data" / "admin-token").read_text().strip()
            for index in range(args.repeat):
                platform = platform_run(url, token, args.model, grpo)
                (work / f"bare-{index}").mkdir()
                plain = bare_run(model, rows_file, grpo, work / f"bare-{index}")
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
        bare_fastest = min(b["trainSeconds"] for _, b in pairs)
        print(f"  fastest of each: TRAINING phase {fastest:.2f} s, trainer.train() {bare_fastest:.2f} s, ratio "
              f"{fastest / bare_fastest:.3f} (the least disturbed by other processes)")


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def reported_updates(seen: list[tuple[int, float]]) -> list[float]:
    """Seconds per update between the events stream's reports of finished updates (progress is sent at most about
    once a second, so a report may cover more than one update)."""
    return [(t1 - t0) / (s1 - s0) for (s0, t0), (s1, t1) in zip(seen, seen[1:], strict=False)]


def report(index: int, platform: dict, plain: dict) -> None:
    run = platform["run"]
    cost = run["cost"]
    phase_training, engine_training = cost["duration"]["training"], cost["trainingSeconds"]
    steps = run["results"]["steps"]
    window = max(1, min(5, len(plain["rewards"]) // 4))  # the first and the last updates averaged
    ours, theirs = platform["rewards"], plain["rewards"]
    print(f"\n[pair {index + 1}] platform run {run['runId'][:12]}: {steps} updates, mean reward of the first "
          f"{window} {mean(ours[:window]):.3f}, of the last {window} {mean(ours[-window:]):.3f}")
    print(f"  TRAINING phase (cost.duration.training)   {phase_training:7.2f} s")
    print(f"  engine clock (cost.trainingSeconds)       {engine_training:7.2f} s")
    print(f"  per update: engine clock / updates        {engine_training / steps:7.3f} s; as the events stream "
          f"reports them, median {statistics.median(reported_updates(platform['seen']) or [float('nan')]):.3f} s")
    updates = plain["updates"]
    print(f"bare TRL: {len(theirs)} updates, mean reward of the first {window} {mean(theirs[:window]):.3f}, of the "
          f"last {window} {mean(theirs[-window:]):.3f}, {plain['saves']} save(s); imports "
          f"{plain['importSeconds']:.1f} s, rendering {plain['renderSeconds']:.2f} s, "
          f"model + trainer {plain['setupSeconds']:.1f} s")
    print(f"  wall time around trainer.train()          {plain['trainSeconds']:7.2f} s")
    print(f"  from on_train_begin                       {plain['fromBeginSeconds']:7.2f} s")
    print(f"  per update: trainer.train() / updates     {plain['trainSeconds'] / len(updates):7.3f} s; each update, "
          f"median {statistics.median(updates):.3f} s (first {updates[0]:.3f}, fastest {min(updates):.3f}, "
          f"slowest {max(updates):.3f})")
    same_rewards = len(ours) == len(theirs) and all(abs(a - b) <= 1e-6 for a, b in zip(ours, theirs, strict=True))
    same_losses = len(ours) == len(theirs) and all(
        a is not None and abs(a - b) <= 1e-4 * max(1.0, abs(b)) for a, b in zip(platform["losses"], plain["losses"],
                                                                                  strict=True))
    diverged = next((i + 1 for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if abs(a - b) > 1e-6), None)
    print(f"  the same rewards, update for update        {'yes' if same_rewards else 'no'}"
          + ("" if diverged is None else f" (they first differ at update {diverged})"))
    print(f"  the same losses, update for update (1e-4)  {'yes' if same_losses else 'no'}")
    print(f"ratio platform/bare: TRAINING phase / trainer.train() {phase_training / plain['trainSeconds']:.3f} "
          f"(target ≤ 1.10); engine clock / from on_train_begin {engine_training / plain['fromBeginSeconds']:.3f}")
    phases = run["timing"]["phaseMillis"]
    print(f"  submission to TRAINING (QUEUED + PREPARING) "
          f"{(phases.get('QUEUED', 0) + phases.get('PREPARING', 0)) / 1000:.2f} s; the POST to the run's end "
          f"followed {platform['followed']:.2f} s (the bare process, start to end: {plain['processSeconds']:.2f} s)")
    if platform["otherCpu"] is not None:
        print(f"noise: other processes on this machine used {platform['otherCpu']:.1f} cpu-s during the platform run "
              f"and {plain['otherCpu']:.1f} cpu-s during the bare one (about 1 on a quiet 2-core machine; much more "
              "means another job shared the cores and the ratio is noise)", flush=True)


if __name__ == "__main__":
    main()
