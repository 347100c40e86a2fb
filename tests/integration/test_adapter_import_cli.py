"""`akka registry adapters import`: a LoRA adapter trained by a bare PEFT script (Transformers and PEFT, no Optimize)
on the stand-in imports as a model version — from its folder or a ZIP of it, the same adapter again being the same
version — evaluates and serves like a trained one; one made on another model is refused naming the base, the module
and both shapes, and registers nothing. On a server of this module's own (the cpu's one serving slot)."""

from __future__ import annotations

import subprocess
import sys
import time
import zipfile

import pytest

from tests.conftest import Cli, built_standin, chat_row, from_standin, start_server, write_jsonl

pytestmark = pytest.mark.integration
MODEL = "optimize/tiny-llama-3.2"

PEFT_SCRIPT = """
import sys
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, LlamaConfig

base, out = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
if base == "another-model":
    model = AutoModelForCausalLM.from_config(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                                         num_attention_heads=4, num_key_value_heads=2,
                                                         vocab_size=1024))
else:
    model = AutoModelForCausalLM.from_pretrained(base)
peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
optimizer = torch.optim.AdamW([p for p in peft.parameters() if p.requires_grad], lr=1e-2)
ids = torch.randint(0, 1000, (2, 16))
for _ in range(3):
    loss = peft(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
peft.save_pretrained(out)
"""


def peft_adapter(base: str, out) -> None:
    done = subprocess.run([sys.executable, "-c", PEFT_SCRIPT, base, str(out)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_an_adapter_made_elsewhere_imports_evaluates_and_serves(tmp_path, capsys):
    made, other = tmp_path / "made", tmp_path / "other"
    peft_adapter(str(built_standin(MODEL)), made)
    peft_adapter("another-model", other)
    proc = start_server(tmp_path / "server")
    try:
        cli = Cli(capsys, proc.url)
        cli.ok("training", "base-models", "select", MODEL, "--from", from_standin(MODEL)["from"])
        cli.ok("training", "projects", "create", "ext")

        imported = cli.json("registry", "adapters", "import", "ext/imported", "-f", str(made), "--base", MODEL,
                            "--alias", "candidate")
        assert (imported["reference"], imported["created"], imported["variant"]) == ("ext/imported:v1", True, "ADAPTER")
        serving = imported["servingModel"]
        assert (serving["adapterRank"], serving["adapterAlpha"], serving["modules"]) == (4, 8.0, ["q_proj", "v_proj"])
        assert serving["baseModel"] == f"{MODEL}:v1" and serving["weightsDigest"].startswith("sha256:")
        assert imported["lineage"]["producedBy"] == {"kind": "import"} and imported["producedBy"]["kind"] == "import"
        assert "candidate" in imported["aliases"]
        archive = tmp_path / "made.zip"
        with zipfile.ZipFile(archive, "w") as packed:
            for path in made.iterdir():
                packed.write(path, f"made/{path.name}")
        again = cli.ok("registry", "adapters", "import", "ext/imported", "-f", str(archive), "--base", MODEL).out
        assert "Already registered: ext/imported:v1 (adapter over optimize/tiny-llama-3.2:v1, rank 4" in again

        refused = cli("registry", "adapters", "import", "ext/imported", "-f", str(other), "--base", MODEL)
        assert refused.code == 1, refused.out
        assert ("the adapter does not fit base model optimize/tiny-llama-3.2: module "
                "model.layers.0.self_attn.q_proj is [64, 64] in the base, and the adapter's lora_A is [4, 32] and "
                "lora_B [32, 4]") in refused.err
        assert cli.json("registry", "models", "get", "ext/imported")["versionCount"] == 1
        missing = cli("registry", "adapters", "import", "ext/imported", "-f", str(tmp_path), "--base", MODEL)
        assert missing.code == 1 and "holds no adapter_config.json and no adapter_model.safetensors" in missing.err

        rows = [chat_row("What is the capital of France?", "Paris."), chat_row("2 + 2?", "4")]
        cli.ok("registry", "datasets", "register", "ext/asks", "-f", str(write_jsonl(tmp_path / "asks.jsonl", rows)))
        evaluation = cli("training", "evaluations", "start", "--model", "ext/imported:candidate", "--dataset",
                         "ext/asks", "--grader", "contains", "--max-new-tokens", "4", "--wait", "--exit-status",
                         "-o", "json-compact")
        assert evaluation.code == 0, evaluation.err
        assert '"model":"ext/imported:v1"' in evaluation.out.splitlines()[-1]

        endpoint = cli.json("training", "endpoints", "create", "--model", "ext/imported:v1")["endpointId"]
        deadline = time.monotonic() + 120
        while not (state := cli.json("training", "endpoints", "get", endpoint[:12]))["settled"]:
            assert time.monotonic() < deadline, state
            time.sleep(0.2)
        assert state["phase"] == "READY"
        import httpx

        answer = httpx.post(f"{proc.url}/v1/chat/completions", headers=proc.headers, timeout=60, json={
            "model": "ext/imported:v1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})
        assert answer.status_code == 200 and answer.json()["model"] == "ext/imported:v1", answer.text
        cli.ok("training", "endpoints", "delete", endpoint[:12])
    finally:
        proc.stop()
