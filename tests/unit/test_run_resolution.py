"""Admission resolves a plan into frozen settings: sources, default kernels, the configuration hash; and the
reference start check's bounds and measurements."""

from __future__ import annotations

import pytest

from optimize.catalog.catalog import load_catalog
from optimize.core.clock import utcnow
from optimize.core.errors import Invalid, Refused
from optimize.schemas.plans import parse_plan
from optimize.store.tables import BaseModelSelection
from optimize.training.admission.kernels import default_kernels
from optimize.training.admission.resolve import admit
from optimize.training.engines.checks import default_bounds, reference_check

E4B, E2B, G12B = "google/gemma-4-E4B-it", "google/gemma-4-E2B-it", "google/gemma-4-12B-it"
LLAMA = "meta-llama/llama-3.2-1b-instruct"


LIGER = {"liger.rms_norm": True, "liger.swiglu": True, "liger.rope": True}


@pytest.mark.parametrize("model, method, profile, devices, liger, expected", [
    (E4B, "sft", "h200", 2, False,
     {"model.attentionImplementation": "flex_attention", "liger.rms_norm": True, "liger.geglu": True}),
    (E2B, "sft", "h200", 4, False,
     {"model.attentionImplementation": "flex_attention", "liger.rms_norm": True, "liger.geglu": True}),
    (G12B, "sft", "h200", 2, False, {"model.attentionImplementation": "flex_attention"}),
    (E4B, "sft", "h200", 1, True, {}),  # Gemma 4's kernels were measured on more than one H200 only
    (E4B, "sft", "a100", 2, True, {}),
    (LLAMA, "sft", "h200", 2, False, {}),  # liger-kernel not installed: nothing of Liger's
    (LLAMA, "sft", "h200", 1, True, LIGER),  # a family Liger patches, on a GPU, where it is installed
    (LLAMA, "sft", "a100", 1, True, LIGER),
    ("qwen/qwen2.5-0.5b-instruct", "sft", "h200", 1, True, LIGER),
    (LLAMA, "dpo", "h200", 1, True, {}),  # TRL reads use_liger_kernel as a dpo run's fused loss
    (LLAMA, "sft", "cpu", 1, True, {}),
])
def test_default_kernels_by_model_type(model, method, profile, devices, liger, expected):
    entry = load_catalog().find(model)
    assert default_kernels(entry, method, profile, devices, on_gpu=profile != "cpu", liger=liger) == expected


def test_default_bounds_grow_with_length_and_keep_stated_ones():
    assert default_bounds(0.001, 100, {}) == {"meanLogprobError": 0.03, "maxLogprobError": 1.0,
                                              "fp32MaxLogprobError": 0.002}
    assert default_bounds(0.02, 4096, {})["meanLogprobError"] == pytest.approx(0.06)
    long = default_bounds(0.0, 16384, {})
    assert long["maxLogprobError"] == 4.0 and long["fp32MaxLogprobError"] == 0.008
    longest = default_bounds(0.0, 32768, {})
    assert longest["maxLogprobError"] == 8.0 and longest["fp32MaxLogprobError"] == 0.016
    assert default_bounds(0.5, 32768, {"max_logprob_error": 2.5, "mean_logprob_error": 0.1}) == {
        "meanLogprobError": 0.1, "maxLogprobError": 2.5, "fp32MaxLogprobError": 0.016}


@pytest.fixture
def session(admission_session):
    return admission_session


def plan_document(**execution) -> dict:
    return {"kind": "run", "project": "proj", "baseModel": "google/gemma-4-e4b-it",
            "config": {"dataset": "chat", "hyperparams": {"optimizer": {"learningRate": 0.001}}},
            "execution": execution or {"deviceProfile": "cpu"}}


def admitted(session, document):
    catalog = load_catalog()
    entry = catalog.find(document["baseModel"])
    selection = BaseModelSelection(entry_id=entry.id, repository=entry.repository, commit="c" * 40,
                                   content_digest="d" * 64, source="import", path="/nowhere", selected_at=utcnow())
    return admit(session, parse_plan(document), document, entry, selection, [])


def test_sources_name_stated_default_and_default_kernel_values(session):
    result = admitted(session, plan_document(deviceProfile="h200", gpus=2))
    assert result.sources["config.hyperparams.optimizer.learningRate"] == "stated"
    assert result.sources["config.hyperparams.lora.rank"] == "default"
    assert result.sources["config.model.attentionImplementation"] == "defaultKernels"
    assert result.sources["config.liger.rms_norm"] == "defaultKernels"
    assert result.resolved.config.model.attention_implementation == "flex_attention"
    assert result.resolved.config.model.precision == "bf16"  # a GPU profile
    assert result.resolved.config.dataset == "proj/chat:v1"  # resolved in the project's namespace, frozen


def test_a_value_the_run_sets_is_kept_over_the_default_kernels(session):
    document = plan_document(deviceProfile="h200", gpus=2)
    document["config"]["model"] = {"attentionImplementation": "sdpa"}
    document["config"]["liger"] = {"geglu": False}
    result = admitted(session, document)
    assert result.resolved.config.model.attention_implementation == "sdpa"
    assert result.sources["config.model.attentionImplementation"] == "stated"
    assert result.resolved.config.liger == {"geglu": False, "rms_norm": True}


def test_the_configuration_hash_covers_config_and_kernels_not_execution(session):
    base = admitted(session, plan_document(deviceProfile="h200", gpus=1)).config_hash
    assert admitted(session, plan_document(deviceProfile="h200", gpus=1, saveEvery=5)).config_hash == base
    assert admitted(session, plan_document(deviceProfile="h200", gpus=2)).config_hash != base  # kernels joined
    other = plan_document(deviceProfile="h200", gpus=1)
    other["config"]["hyperparams"]["optimizer"]["learningRate"] = 0.002
    assert admitted(session, other).config_hash != base


def test_cpu_runs_resolve_fp32_without_recomputation(session):
    model = admitted(session, plan_document(deviceProfile="cpu")).resolved.document()["config"]["model"]
    assert model == {"precision": "fp32", "gradientCheckpointing": False, "attentionImplementation": "sdpa",
                     "adapter": "lora"}


def test_an_evaluation_over_preference_pairs_is_refused_in_an_evaluation_s_words(session):
    from optimize.training.admission.resolve import pick_dataset

    with pytest.raises(Refused) as refused:
        pick_dataset(session, "pairs", "proj", "dataset", None)
    message = refused.value.message
    assert "dataset proj/pairs:v1 holds preference pairs; an evaluation reads chat rows" in message
    assert "cannot be evaluated" in message and "method" not in message and "train" not in message
    assert refused.value.hint == "evaluate on a chat dataset"
    assert pick_dataset(session, "chat", "proj", "dataset", None).reference == "proj/chat:v1"


def test_admission_refusals(session):
    document = plan_document()
    document["config"]["dataset"] = "pairs"
    with pytest.raises(Refused, match="holds preference pairs; method sft trains on chat rows"):
        admitted(session, document)
    document = plan_document()
    document["config"].update(dataset="tooled", method="grpo")
    with pytest.raises(Refused, match="proj/tooled:v1 has 3 row.s. that offer tools; the trl engine of a grpo run"):
        admitted(session, document)
    document = plan_document()
    document["config"]["liger"] = {"rms_norm": True}
    with pytest.raises(Refused, match="liger kernels need a GPU"):
        admitted(session, document)
    document = plan_document(deviceProfile="h200", gpus=1)
    document["config"]["liger"] = {"fused_linear_cross_entropy": True}
    with pytest.raises(Refused, match="would replace the fused LM head TRL's supervised trainer computes its loss"):
        admitted(session, document)
    document = plan_document(deviceProfile="h200", gpus=1)
    document["config"].update(dataset="pairs", method="dpo", liger={"rms_norm": True})
    with pytest.raises(Refused, match=r"config.liger turns on Liger's kernels in supervised runs; a dpo run does not "
                                      r"take them \(its Liger setting: preference.fusedLoss"):
        admitted(session, document)
    document = plan_document()
    document["config"]["dataset"] = "Bad Ref!"
    with pytest.raises(Invalid, match="config.dataset"):
        admitted(session, document)
    document = plan_document(shareBase=True)
    document["config"].update(dataset="pairs", method="dpo")
    with pytest.raises(Refused, match="execution.shareBase trains supervised runs side by side on one loaded base; a "
                                      "dpo run trains alone"):
        admitted(session, document)
    assert admitted(session, plan_document(shareBase=True)).resolved.execution.share_base is True
    assert "shareBase" not in admitted(session, plan_document()).resolved.document()["execution"]  # stored as before


def test_reference_check_passes_for_the_same_weights_and_fails_for_other_ones(standin_dirs):
    import torch
    from transformers import AutoModelForCausalLM

    path = str(standin_dirs["llama3.2"][0])
    load = lambda dtype: AutoModelForCausalLM.from_pretrained(path, dtype=dtype)  # noqa: E731
    batch = {"input_ids": torch.tensor([[1, 5, 9, 12, 40, 41, 42, 2]]),
             "attention_mask": torch.ones(1, 8, dtype=torch.long)}
    same = reference_check(load(torch.float32), load, batch, torch.float32, {})
    assert same["status"] == "passed" and same["meanLogprobError"] == 0 and same["roundingError"] == 0
    assert same["tokens"] == 7 and same["longest"] == 8
    other = load(torch.float32)
    with torch.no_grad():
        for parameter in other.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.5)
    failed = reference_check(other, load, batch, torch.float32, {})
    assert failed["status"] == "failed" and "meanLogprobError" in failed["over"]


def test_a_worker_sees_only_its_granted_gpus_with_expandable_segments(monkeypatch):
    from optimize.jobs.local_executor import device_environment

    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    assert device_environment(["h200:2", "h200:5"], "gpu") == {
        "CUDA_VISIBLE_DEVICES": "2,5", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert device_environment(["cpu:0"], "cpu")["CUDA_VISIBLE_DEVICES"] == ""
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:512")  # the deployment's own setting wins
    assert device_environment(["h200:0"], "gpu")["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:512"


def test_envelopes_are_advisory_by_default_and_required_when_strict():
    from optimize.training.admission.envelopes import check_envelopes

    entry = load_catalog().find("optimize/tiny-llama-3.2")  # measured: sft fp32 on cpu up to 512 tokens
    assert check_envelopes(entry, "sft", "fp32", "cpu", 1, True, 512, strict=False) == []
    [warning] = check_envelopes(entry, "sft", "fp32", "cpu", 1, True, 2048, strict=False)
    assert "covers sft at fp32 on 1 cpu slot with maxSeqLength 2048" in warning
    assert warning.endswith("the run may run out of device memory")
    with pytest.raises(Refused, match="this deployment requires one") as refused:
        check_envelopes(entry, "sft", "fp32", "cpu", 1, True, 2048, strict=True)
    assert "akka training base-models get optimize/tiny-llama-3.2" in refused.value.hint


def _profiles(**counts):
    from optimize.jobs.devices import DeviceProfile

    return [DeviceProfile(name=name, kind="cpu" if name == "cpu" else "gpu", devices=n) for name, n in counts.items()]


@pytest.mark.parametrize("method, profile, devices, words", [
    ("sft", "a100", 1, "execution.deviceProfile 'a100' is not a device profile of this deployment; profiles here: "
                       "cpu (4 devices), h200 (8 devices)"),
    ("sft", "h200", 9, "execution.gpus 9 asks for more devices of profile 'h200' than this deployment has"),
    ("grpo", "h200", 2, "the trl engine trains grpo runs on 1 device; execution.gpus 2 needs an engine"),
    ("grpo", "cpu", 2, "the trl engine trains grpo runs on 1 device"),
])
def test_layout_limits_refuse_under_every_envelope_mode(method, profile, devices, words):
    from optimize.training.admission.layout import check_layout

    entry = load_catalog().find("optimize/tiny-llama-3.2")
    with pytest.raises(Refused) as refused:
        check_layout(entry, method, "fp32", profile, devices, 256, _profiles(cpu=4, h200=8))
    assert words in refused.value.message and refused.value.hint


@pytest.mark.parametrize("method", ["sft", "dpo"])
def test_supervised_and_preference_runs_train_data_parallel_on_the_devices_of_a_node(method):
    from optimize.training.admission.layout import check_layout

    entry = load_catalog().find("optimize/tiny-llama-3.2")
    check_layout(entry, method, "bf16", "h200", 8, 256, _profiles(cpu=4, h200=8))  # no refusal
    check_layout(entry, method, "fp32", "cpu", 2, 256, _profiles(cpu=4, h200=8))


def test_a_measured_envelope_larger_than_this_node_is_refused():
    from optimize.training.admission.layout import check_layout

    entry = load_catalog().find("optimize/tiny-llama-3.2")
    measured = next(e for e in entry.envelopes if e.device_profile == "cpu")
    check_layout(entry, "sft", measured.precision, "cpu", 1, 256, _profiles(cpu=1), node_memory_gib=64)
    with pytest.raises(Refused) as refused:
        check_layout(entry, "sft", measured.precision, "cpu", 1, 256, _profiles(cpu=1),
                     node_memory_gib=measured.host_memory_gib / 2)
    assert f"peaks at {measured.host_memory_gib:g} GiB of host memory; this node has" in refused.value.message


def grpo_document(gpus: int, **rl) -> dict:
    return {"kind": "run", "project": "proj", "baseModel": "google/gemma-4-e4b-it",
            "config": {"dataset": "chat", "method": "grpo", "rlHyperparams": rl,
                       "reward": {"terms": [{"kind": "contains"}]}},
            "execution": {"deviceProfile": "h200", "gpus": gpus}}


def test_a_kl_penalty_on_an_inherited_adapter_over_several_gpus_is_refused(session):
    """Release notes, "Omitted klBeta": on more than one GPU, a KL penalty on a run that trains an inherited adapter
    is refused with "Set klBeta to 0, or train without inheriting a policy." (klBeta omitted: the default 0.04)."""
    from optimize.training.server.runs import refuse_kl_on_inherited_policy

    branch = {"parentRunId": "p" * 32, "restore": "weights"}
    with pytest.raises(Refused) as refused:
        refuse_kl_on_inherited_policy(admitted(session, grpo_document(2)), branch)
    assert "a grpo run on 2 GPUs that trains the adapter it inherits (a weights branch of run pppppppppppp)" in \
        refused.value.message and "klBeta is 0.04 (the default)" in refused.value.message
    assert refused.value.hint == "Set klBeta to 0, or train without inheriting a policy."
    with pytest.raises(Refused, match=r"klBeta is 0.1 \(stated\)"):
        refuse_kl_on_inherited_policy(admitted(session, grpo_document(4, klBeta=0.1)), branch)
    # no KL penalty, one GPU, or no inherited adapter: admitted
    refuse_kl_on_inherited_policy(admitted(session, grpo_document(2, klBeta=0)), branch)
    refuse_kl_on_inherited_policy(admitted(session, grpo_document(1)), branch)
    refuse_kl_on_inherited_policy(admitted(session, grpo_document(2)), None)


def test_stop_when_is_a_reinforcement_run_s_and_its_kl_bound_needs_a_kl_penalty(session):
    """`execution.stopWhen` is resolved as stated; a supervised or preference run, an empty one, a negative or
    non-finite bound and a KL bound without a KL penalty are refused by its field path."""
    document = grpo_document(1, klBeta=0.04)
    document["execution"]["stopWhen"] = {"rewardDropBelow": 0.2, "klAbove": 0.5}
    result = admitted(session, document)
    assert result.resolved.document()["execution"]["stopWhen"] == {"rewardDropBelow": 0.2, "klAbove": 0.5}
    assert result.sources["execution.stopWhen.klAbove"] == "stated"
    assert admitted(session, grpo_document(1)).resolved.document()["execution"]["stopWhen"] is None
    sft = plan_document(deviceProfile="cpu", stopWhen={"klAbove": 0.3})
    with pytest.raises(Refused) as refused:
        admitted(session, sft)
    assert refused.value.message == ("execution.stopWhen watches a reinforcement run's reward and KL, which a sft run "
                                     "does not report")
    assert refused.value.hint == "remove execution.stopWhen, or train with method grpo or gspo"
    dpo = plan_document(deviceProfile="cpu", stopWhen={"rewardDropBelow": 0.3})
    dpo["config"].update(dataset="pairs", method="dpo")
    with pytest.raises(Refused, match="which a dpo run does not report"):
        admitted(session, dpo)
    document["execution"]["stopWhen"] = {}
    with pytest.raises(Invalid, match="^execution.stopWhen names no bound$"):
        admitted(session, document)
    document = grpo_document(1, klBeta=0)
    document["execution"]["stopWhen"] = {"klAbove": 0.3}
    with pytest.raises(Refused, match=r"^execution.stopWhen.klAbove watches the KL against the starting policy, "
                                      r"which a run with rlHyperparams.klBeta 0 does not measure$"):
        admitted(session, document)
    for bad, words in (({"klAbove": -1}, "execution.stopWhen.klAbove: Input should be greater than or equal to 0"),
                       ({"rewardDropBelow": float("nan")}, "execution.stopWhen.rewardDropBelow: Input should be a "
                                                           "finite number"),
                       ({"rewardBelow": 1}, "execution.stopWhen.rewardBelow: unknown field")):
        document["execution"]["stopWhen"] = bad
        with pytest.raises(Invalid) as invalid:
            parse_plan(document)
        assert words in invalid.value.message


def test_pause_at_step_is_kept_outside_the_hash_and_refused_unless_before_the_last_update(session):
    """`execution.pauseAtStep` is resolved as stated (not in the configuration hash); one that is not a positive
    integer, or at or after the run's last update (it would never pause), is refused by its field path."""
    document = plan_document(deviceProfile="cpu", pauseAtStep=3)
    document["config"]["hyperparams"]["training"] = {"maxSteps": 6}
    result = admitted(session, document)
    assert result.resolved.execution.pause_at_step == 3
    assert result.resolved.document()["execution"]["pauseAtStep"] == 3
    assert result.sources["execution.pauseAtStep"] == "stated"
    del document["execution"]["pauseAtStep"]
    unpaused = admitted(session, document)
    assert unpaused.config_hash == result.config_hash and unpaused.resolved.execution.pause_at_step is None
    assert unpaused.sources["execution.pauseAtStep"] == "default"
    for at in (6, 7):
        document["execution"]["pauseAtStep"] = at
        with pytest.raises(Refused) as refused:
            admitted(session, document)
        assert refused.value.message == (f"execution.pauseAtStep {at} is at or after this run's last update: it "
                                         "makes 6 updates, so it would never pause")
        assert refused.value.hint == "set execution.pauseAtStep below 6 (1 to 5), or remove it"
    document = plan_document(deviceProfile="cpu", pauseAtStep=2)  # 10 rows in batches of 8: 2 updates
    with pytest.raises(Refused, match=r"^execution.pauseAtStep 2 is at or after this run's last update: it makes 2 "
                                      r"updates, so it would never pause$"):
        admitted(session, document)
    document["execution"]["pauseAtStep"] = 1
    assert admitted(session, document).resolved.execution.pause_at_step == 1
    document["config"]["hyperparams"]["training"] = {"maxSteps": 1}
    with pytest.raises(Refused) as refused:
        admitted(session, document)
    assert "it makes 1 update, so it would never pause" in refused.value.message
    assert refused.value.hint == "remove execution.pauseAtStep: a run of one update has no update to pause after"
    for bad, words in ((0, "Input should be greater than or equal to 1"),
                       (-2, "Input should be greater than or equal to 1"),
                       (2.5, "Input should be a valid integer, got a number with a fractional part"),
                       ("soon", "Input should be a valid integer")):
        document["execution"]["pauseAtStep"] = bad
        with pytest.raises(Invalid) as invalid:
            parse_plan(document)
        assert f"execution.pauseAtStep: {words}" in invalid.value.message


def llama_plan(**config) -> dict:
    return {"kind": "run", "project": "proj", "baseModel": "meta-llama/llama-3.2-1b-instruct",
            "config": {"dataset": "chat", "maxSeqLength": 1024,
                       "hyperparams": {"training": {"batchSize": 16}}, **config},
            "execution": {"deviceProfile": "h200", "gpus": 1}}


def admitted_on(session, document, memory_gib, devices=1):
    from optimize.jobs.devices import DeviceProfile

    entry = load_catalog().find(document["baseModel"])
    selection = BaseModelSelection(entry_id=entry.id, repository=entry.repository, commit="c" * 40,
                                   content_digest="d" * 64, source="import", path="/nowhere", selected_at=utcnow())
    profiles = [DeviceProfile(name="h200", kind="gpu", devices=devices, memoryGiB=memory_gib)]
    return admit(session, parse_plan(document), document, entry, selection, profiles)


@pytest.mark.parametrize("memory_gib, checkpointing", [(140, False), (40, True)])
def test_gradient_checkpointing_is_resolved_from_the_memory_estimate_on_a_gpu(session, memory_gib, checkpointing,
                                                                               monkeypatch):
    monkeypatch.setattr("optimize.training.admission.kernels.liger_installed", lambda: False)
    result = admitted_on(session, llama_plan(), memory_gib)
    assert result.resolved.config.model.gradient_checkpointing is checkpointing
    assert result.sources["config.model.gradientCheckpointing"] == "memoryEstimate"
    memory = result.memory
    assert memory["predicted"]["gradientCheckpointing"] is checkpointing
    assert memory["predicted"]["peakGiB"] == pytest.approx(7.0 if checkpointing else 38.1, abs=0.1)
    assert "38.1 GiB" in memory["checkpointingReason"] and memory["deviceMemoryGiB"] == memory_gib


@pytest.mark.parametrize("memory_gib, batch, sharding, checkpointing", [
    (140, 16, "ddp", False), (9, 16, "ddp", True), (3.5, 4, "fsdp", True), (6, 16, "fsdp", True)])
def test_sharding_on_several_gpus_is_fsdp_only_where_a_whole_copy_does_not_fit_one(session, memory_gib, batch,
                                                                                     sharding, checkpointing,
                                                                                     monkeypatch):
    monkeypatch.setattr("optimize.training.admission.kernels.liger_installed", lambda: False)
    document = llama_plan(hyperparams={"training": {"batchSize": batch}})
    document["execution"]["gpus"] = 2
    result = admitted_on(session, document, memory_gib, devices=2)
    assert result.resolved.execution.sharding == sharding
    assert result.sources["execution.sharding"] == "memoryEstimate"
    assert result.resolved.config.model.gradient_checkpointing is checkpointing
    predicted, reason = result.memory["predicted"], result.memory["shardingReason"]
    budget = round(memory_gib * 0.9, 1)
    if sharding == "ddp":
        assert predicted["shards"] == 1 and f"within {budget:g} GiB" in reason
        return
    # the weights (2.3 GiB at bf16) halved, plus the two layers gathered at a time
    assert predicted["shards"] == 2 and 1.15 < predicted["weightsGiB"] < 1.15 + 0.3
    assert f"past {budget:g} GiB" in reason and "sharded across the 2 devices" in reason
    if batch == 4:
        assert predicted["peakGiB"] < budget and "still past" not in reason
    else:  # 16 rows of 1024 tokens keep more than 5.4 GiB on each device, sharded or not
        assert predicted["peakGiB"] > budget and "still past 5.4 GiB" in reason and "smaller batchSize" in reason


def test_a_stated_sharding_is_kept_and_one_device_refuses_it(session, monkeypatch):
    monkeypatch.setattr("optimize.training.admission.kernels.liger_installed", lambda: False)
    document = llama_plan()
    document["execution"] |= {"gpus": 2, "sharding": "fsdp"}
    result = admitted_on(session, document, 140, devices=2)
    assert result.resolved.execution.sharding == "fsdp" and result.sources["execution.sharding"] == "stated"
    assert result.memory["shardingReason"] is None and result.memory["predicted"]["shards"] == 2
    one = llama_plan()
    one["execution"]["sharding"] = "ddp"
    with pytest.raises(Refused, match=r"execution.sharding ddp .* this run has one \(execution.gpus 1\)") as refused:
        admitted_on(session, one, 140)
    assert refused.value.hint == "remove execution.sharding, or set execution.gpus to 2 or more"
    cpu = admitted(session, plan_document(deviceProfile="cpu"))
    assert cpu.resolved.execution.sharding is None  # one device: nothing to split


def test_liger_defaults_join_the_estimate_and_a_stated_choice_is_kept(session, monkeypatch):
    monkeypatch.setattr("optimize.training.admission.kernels.liger_installed", lambda: True)
    result = admitted_on(session, llama_plan(), 140)
    assert result.resolved.config.liger == {"rms_norm": True, "swiglu": True, "rope": True}
    assert result.sources["config.liger.swiglu"] == "defaultKernels"
    # with the fused norm and swiglu (rank 8 by default: a smaller adapter than the 16)
    assert result.memory["predicted"]["peakGiB"] == pytest.approx(32.2, abs=0.1)
    stated = admitted_on(session, llama_plan(model={"gradientCheckpointing": True}, liger={"rope": False}), 140)
    assert stated.resolved.config.model.gradient_checkpointing is True
    assert stated.sources["config.model.gradientCheckpointing"] == "stated"
    assert stated.memory["checkpointingReason"] is None and stated.memory["predicted"]["gradientCheckpointing"]
    assert stated.resolved.config.liger["rope"] is False and stated.sources["config.liger.rope"] == "stated"
    assert stated.config_hash != result.config_hash


def test_fixed_choices_a_method_makes_are_not_the_estimate_s(session):
    from optimize.training.methods import method_for

    cpu = admitted(session, plan_document(deviceProfile="cpu"))
    assert cpu.sources["config.model.gradientCheckpointing"] == "default"
    assert cpu.memory["checkpointingReason"] is None
    assert method_for("grpo").gradient_checkpointing(False) is False  # rollouts generate with the cache
    assert method_for("dpo").gradient_checkpointing(True) is True
    assert method_for("sft").gradient_checkpointing(False) is None and method_for("dpo").gradient_checkpointing(False) \
        is None  # on a GPU: the estimate decides


def test_packing_resolves_by_profile_and_attention_and_is_warned_where_it_needs_a_dense_mask(session):
    def resolved(packing=None, attention=None, profile="h200"):
        document = plan_document(deviceProfile=profile, gpus=1)
        if packing is not None:
            document["config"]["packing"] = packing
        if attention:
            document["config"]["model"] = {"attentionImplementation": attention}
        result = admitted(session, document)
        return result.resolved.config.packing, result.sources["config.packing"], result.warnings

    assert resolved(profile="cpu")[:2] == (True, "default")
    assert resolved()[:2] == (False, "default")  # sdpa on a GPU: off unless stated
    assert resolved(attention="flex_attention")[:2] == (True, "default")
    packed, source, warnings = resolved(packing=True)
    assert (packed, source) == (True, "stated")
    assert any("config.packing under sdpa on a GPU keeps each row to itself through a mask" in w for w in warnings)
    assert not any("config.packing" in w for w in resolved(attention="flex_attention")[2])
