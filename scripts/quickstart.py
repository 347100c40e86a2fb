"""The quickstart (`make demo`): a server on the embedded defaults in a temporary data dir, then the main job
as far as the platform reaches today — register the support datasets (training chats, held-out chats, preference
pairs, tickets for reinforcement) and the triage scoring bundle, check the bundle against the tickets, list the
base-model catalog and capacity, select (build, offline) the quickstart's small stand-in model, analyze the
chat dataset under it with the estimates for the example run file, create the project and train the example
run (LoRA SFT on the cpu, followed to its end), then show the run, its last metrics, its snapshots and the
model it registered, evaluate the base model and the trained adapter on the held-out chats (the adapter wins),
branch a dpo run from that adapter on the preference pairs and a grpo run on the tickets scored by the bundle
(its mean reward rises from its first pass to its last), score both adapters on the held-out chats with the
bundle, and serve the grpo adapter from an endpoint that answers a new ticket.

Every step runs the real `akka` command and prints it before its output.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
AKKA = [sys.executable, "-m", "optimize"]
EXAMPLES = "examples/datasets"  # paths relative to the repository root, where every step runs
RUN_FILE = "examples/runs/support-sft.yaml"
DPO_OVERRIDES = "examples/runs/support-dpo-overrides.yaml"
GRPO_OVERRIDES = "examples/runs/support-grpo-overrides.yaml"
BUNDLE = "examples/bundles/triage"
QUESTION = "My speaker will not turn on. Order #4000."  # in no dataset: {"category": "hardware", "urgent": true}


def wait_ready(data_dir: Path, process: subprocess.Popen) -> str:
    ready = data_dir / "server.json"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"the server exited with {process.returncode}")
        if ready.exists():
            url = json.loads(ready.read_text())["url"]
            try:
                with urllib.request.urlopen(f"{url}/v1/health", timeout=2):
                    return url
            except OSError:
                pass
        time.sleep(0.1)
    sys.exit("the server did not start within 60 s")


def akka(url: str, *args: str) -> None:
    print(f"\n$ akka {shlex.join(args)}", flush=True)  # quoted as a shell needs it: copy-paste safe
    done = subprocess.run([*AKKA, *args], env={**os.environ, "OPTIMIZE_URL": url, "COLUMNS": "200"}, cwd=REPO)
    if done.returncode != 0:
        sys.exit(f"quickstart step failed: akka {shlex.join(args)}")


def akka_json(url: str, *args: str) -> dict:
    """A step's JSON answer, read without printing it (to learn an id the next shown step names)."""
    done = subprocess.run([*AKKA, *args, "-o", "json"], env={**os.environ, "OPTIMIZE_URL": url}, cwd=REPO,
                          capture_output=True, text=True)
    if done.returncode != 0:
        # in JSON mode a refusal is {"error": {...}} on stdout; only Click's own usage errors are on stderr
        sys.exit(f"quickstart step failed: akka {shlex.join(args)}: {(done.stdout or done.stderr).strip()}")
    return json.loads(done.stdout)


def main() -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="optimize-quickstart-"))
    print(f"$ akka server start --port 0 --data-dir {data_dir}", flush=True)
    server = subprocess.Popen([*AKKA, "server", "start", "--port", "0", "--data-dir", str(data_dir)])
    try:
        url = wait_ready(data_dir, server)
        akka(url, "server", "status")
        akka(url, "registry", "info")
        akka(url, "registry", "datasets", "register", "support/chat", "-f", f"{EXAMPLES}/support-chat.jsonl",
             "--alias", "train")
        akka(url, "registry", "datasets", "register", "support/preferences", "-f",
             f"{EXAMPLES}/support-preferences.jsonl")
        akka(url, "registry", "datasets", "register", "support/chat-heldout", "-f",
             f"{EXAMPLES}/support-chat-heldout.jsonl")
        akka(url, "registry", "datasets", "register", "support/tickets", "-f", f"{EXAMPLES}/support-tickets.jsonl")
        akka(url, "registry", "bundles", "register", "support/triage", "-f", BUNDLE)
        akka(url, "registry", "bundles", "check", "support/triage", "--dataset", "support/tickets")
        akka(url, "registry", "datasets", "get", "support/chat:train")
        akka(url, "registry", "datasets", "versions", "support/preferences")
        akka(url, "registry", "datasets", "list")
        akka(url, "registry", "namespaces", "list")
        akka(url, "training", "base-models", "list")
        akka(url, "training", "capacity")
        akka(url, "training", "base-models", "select", "optimize/small-smollm2")
        akka(url, "training", "base-models", "get", "optimize/small-smollm2")
        akka(url, "training", "datasets", "analyze", "support/chat:train", "-f", RUN_FILE, "--wait")
        akka(url, "training", "projects", "create", "support")
        akka(url, "training", "runs", "start", "-f", RUN_FILE, "--dry-run")
        akka(url, "training", "runs", "start", "-f", RUN_FILE, "--force", "--wait", "--exit-status")
        akka(url, "training", "runs", "list", "--project", "support")
        run = akka_json(url, "training", "runs", "list", "--project", "support")["runs"][0]
        akka(url, "training", "runs", "get", run["runId"][:12])
        akka(url, "training", "runs", "metrics", run["runId"][:12], "--limit", "5")
        akka(url, "training", "runs", "snapshots", run["runId"][:12])
        akka(url, "registry", "models", "get", f"support/{run['modelName']}")
        akka(url, "registry", "models", "list", "--project", "support")
        akka(url, "training", "projects", "list")
        model = run["results"]["model"]
        for evaluated in (["--model", "optimize/small-smollm2", "--project", "support"], ["--model", model]):
            akka(url, "training", "evaluations", "start", *evaluated, "--dataset", "support/chat-heldout",
                 "--max-new-tokens", "24", "--wait", "--exit-status")
        akka(url, "training", "projects", "scores", "support")
        # preference tuning: a dpo branch of the supervised run, on the preference pairs, from its adapter
        akka(url, "training", "runs", "branch", run["runId"][:12], "--restore", "weights", "--overrides",
             DPO_OVERRIDES, "--max-steps", "12", "--wait", "--exit-status")
        dpo = akka_json(url, "training", "runs", "list", "--project", "support")["runs"][0]["results"]["preference"]
        table = akka_json(url, "training", "projects", "scores", "support")["groups"][0]
        base = table["baseline"]["meanScore"]
        trained = table["columns"][0]["meanScore"]
        # reinforcement: a grpo branch of the supervised run, its sampled answers scored by the triage bundle
        akka(url, "training", "runs", "branch", run["runId"][:12], "--restore", "weights", "--overrides",
             GRPO_OVERRIDES, "--wait", "--exit-status")
        grpo = akka_json(url, "training", "runs", "list", "--project", "support")["runs"][0]
        akka(url, "training", "runs", "get", grpo["runId"][:12])
        akka(url, "training", "runs", "metrics", grpo["runId"][:12])
        # the same tickets are rolled out on each of its 3 passes: the first pass's mean reward against the last's
        rewards = [step["reward"] for step in akka_json(url, "training", "runs", "metrics", grpo["runId"])["steps"]]
        per_pass = len(rewards) // 3
        first, last = sum(rewards[:per_pass]) / per_pass, sum(rewards[-per_pass:]) / per_pass
        # and both adapters' greedy answers to the held-out tickets, scored by the same bundle
        for adapter in (model, grpo["results"]["model"]):
            akka(url, "training", "evaluations", "start", "--model", adapter, "--dataset", "support/chat-heldout",
                 "--grader", "bundle:support/triage#triage", "--max-new-tokens", "24", "--wait", "--exit-status")
        akka(url, "training", "projects", "scores", "support", "--grader", "bundle:support/triage#triage")
        # serve the grpo adapter and ask it a new ticket (its instructions: its first training row's system message)
        akka(url, "training", "endpoints", "create", "--model", grpo["results"]["model"], "--wait", "--timeout", "600")
        endpoint = akka_json(url, "training", "endpoints", "list", "--project", "support")["endpoints"][0]["endpointId"]
        ask = ["training", "endpoints", "send", endpoint[:12], "--input", QUESTION, "--temperature", "0",
               "--max-tokens", "32"]
        akka(url, *ask)
        answer = akka_json(url, *ask)["choices"][0]["message"]["content"]
        akka(url, "training", "endpoints", "delete", endpoint[:12])
        print("\nQuickstart done: four datasets and a scoring bundle registered, the small stand-in selected, the "
              f"chat dataset analyzed, the example run trained and its adapter registered as {model}; json-label-match "
              f"mean score {base:.3f} for the base model, {trained:.3f} for the trained adapter on the held-out "
              f"tickets; a dpo branch of it reached preference accuracy {dpo['accuracy']:.2f}; a grpo branch raised "
              f"its mean reward from {first:.3f} on its first pass over the tickets to {last:.3f} on its last; the "
              f"served adapter answered {answer!r} to {QUESTION!r}.", flush=True)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
