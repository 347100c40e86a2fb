"""Full fine-tuning (`config.model.adapter: full`) against a real server, real workers and real TRL training on the
cpu: every weight trains, with the per-update losses of bare TRL's supervised trainer on the same rendered rows;
paused and resumed it ends with the uninterrupted run's weights; its weights register as a WEIGHTS version that
downloads as a Transformers folder; what cannot take it is refused by name."""

from __future__ import annotations

import pytest

from tests.conftest import Cli, built_standin
from tests.run_fixtures import MODEL, capital_rows, capitals_project, followed, plan, write_plan

pytestmark = pytest.mark.integration

STEPS, BATCH, RATE, SEED = 4, 4, 1e-4, 3


def full_plan(name: str, **execution) -> dict:
    document = plan(name, "chat", modelName="everything")
    document["config"].update(seed=SEED, packing=False, model={"adapter": "full"})
    document["config"]["hyperparams"] = {"optimizer": {"learningRate": RATE},
                                         "training": {"maxSteps": STEPS, "batchSize": BATCH}}
    document["execution"] = {"deviceProfile": "cpu", **execution}
    return document


def bare_trl_losses(tmp_path) -> list[float]:
    """The same rows rendered and masked as the run's worker renders them, trained by TRL's SFTTrainer with every
    weight (no PEFT), the run's optimizer, schedule, seed and batches, at fp32 on the cpu."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    from optimize.catalog.catalog import load_catalog
    from optimize.chat.render import LossPolicy
    from optimize.worker.rendering import renderer_for

    entry, folder = load_catalog().find(MODEL), str(built_standin(MODEL))
    renderer = renderer_for({"id": entry.id, "family": entry.family, "path": folder,
                             "chatTemplate": entry.chat_template})
    rows = []
    for row in capital_rows(2):
        rendered = renderer.render(row, LossPolicy("final", True, None))
        rows.append({"input_ids": rendered.input_ids,
                     "labels": [t if m else -100 for t, m in zip(rendered.input_ids, rendered.loss_mask, strict=True)]})
    losses: list[float] = []

    class Losses(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                losses.append(float(logs["loss"]))

    args = SFTConfig(output_dir=str(tmp_path / "bare"), max_steps=STEPS, per_device_train_batch_size=BATCH,
                     learning_rate=RATE, lr_scheduler_type="linear", seed=SEED, data_seed=SEED, logging_steps=1,
                     save_strategy="no", use_cpu=True, report_to="none", max_length=256,
                     dataset_kwargs={"skip_prepare_dataset": True}, remove_unused_columns=False)
    SFTTrainer(model=AutoModelForCausalLM.from_pretrained(folder, dtype="float32", attn_implementation="sdpa"),
               args=args, processing_class=AutoTokenizer.from_pretrained(folder), train_dataset=Dataset.from_list(rows),
               callbacks=[Losses()]).train()
    return losses


@pytest.fixture(scope="module")
def project(sqlite_server, tmp_path_factory) -> dict:
    return capitals_project(sqlite_server.url, tmp_path_factory.mktemp("full"), "full")


def test_a_full_fine_tune_trains_every_weight_as_bare_trl_does_and_resumes_to_its_weights(project, sqlite_server,
                                                                                         tmp_path, capsys):
    cli, name, client = Cli(capsys, sqlite_server.url), project["name"], project["client"]

    whole = followed(cli, "training", "runs", "start", "-f", write_plan(tmp_path, full_plan(name)), "--force",
                     "--wait")
    assert whole["phase"] == "COMPLETED", whole["failureReason"]
    settings = cli.json("training", "runs", "get", whole["runId"], "--settings")["settings"]
    assert settings["config.model.adapter"] == {"value": "full", "source": "stated"}
    losses = [step["loss"] for step in cli.json("training", "runs", "metrics", whole["runId"])["steps"]]
    # within float tolerance: the worker and this test reduce on different numbers of threads
    assert losses == pytest.approx(bare_trl_losses(tmp_path), rel=1e-4), losses

    # paused at its second update and resumed from that save: the same weights as the run never paused
    paused = followed(cli, "training", "runs", "start", "-f",
                      write_plan(tmp_path, full_plan(name, pauseAtStep=2)), "--force", "--wait")
    assert paused["phase"] == "PAUSED", paused["failureReason"]
    cli.ok("training", "runs", "resume", paused["runId"])
    resumed = followed(cli, "training", "runs", "wait", paused["runId"])
    assert resumed["phase"] == "COMPLETED", resumed["failureReason"]
    assert resumed["results"]["weightsDigest"] == whole["results"]["weightsDigest"] is not None
    resumed_losses = [step["loss"] for step in cli.json("training", "runs", "metrics", paused["runId"])["steps"]]
    assert resumed_losses == pytest.approx(losses, rel=1e-6)

    # every weight registers as a WEIGHTS version over the base model, and downloads as a Transformers folder
    reference = whole["results"]["model"]
    version = client.get(f"/v1/registry/models/{reference.replace(':', '/versions/')}").json()
    assert version["variant"] == "WEIGHTS" and version["servingModel"]["trained"] == "full"
    assert "full weights over" in cli.ok("registry", "models", "get", reference).out
    target = tmp_path / "download"
    shown = cli.ok("registry", "models", "download", reference, "-d", str(target)).out
    assert "AutoModelForCausalLM.from_pretrained" in shown
    from transformers import AutoModelForCausalLM

    from optimize.training.adapters import weights_digest

    assert weights_digest(target / "model.safetensors") == whole["results"]["weightsDigest"]
    assert AutoModelForCausalLM.from_pretrained(target).num_parameters() > 0

    # an evaluation or an endpoint loads base models and adapters, and says so
    refused = cli("training", "evaluations", "start", "--model", reference, "--dataset", f"{name}/chat")
    assert refused.code != 0 and "holds every weight of a full fine-tune" in refused.err


@pytest.mark.parametrize(("change", "words"), [
    ({"model": {"adapter": "qlora"}}, "config.model.adapter: qlora loads the base model quantized to 4 bits by "
                                      "bitsandbytes, which needs a GPU; the cpu device profile cannot run it"),
    ({"model": {"adapter": "full"}, "smoke": {"rows": 2}}, "config.smoke answers with the LoRA adapter its slice "
                                                           "trained; config.model.adapter: full trains every weight"),
])
def test_what_cannot_train_other_weights_is_refused_by_name(project, sqlite_server, tmp_path, capsys, change, words):
    cli = Cli(capsys, sqlite_server.url)
    document = plan(project["name"], "chat")
    document["config"].update(change)
    refused = cli("training", "runs", "start", "-f", write_plan(tmp_path, document), "--dry-run")
    assert refused.code != 0 and words in refused.err, refused.err
