"""The resolved plan (`schemas.resolved`): admission makes one model per method; its JSON is what the run row stores
and `runs get` shows, the worker's spec carries it and the worker reads it back into the same model; a plan's
learningRate, klBeta and maxSeqLength reach the TRL config the method builds, by attribute all the way."""

from __future__ import annotations

import pytest

from optimize.catalog.catalog import load_catalog
from optimize.core.clock import utcnow
from optimize.schemas.jobs import RunSpec
from optimize.schemas.plans import load_plan_text, parse_plan
from optimize.schemas.resolved import (
    ResolvedDpo,
    ResolvedPlan,
    ResolvedReinforcement,
    ResolvedSft,
    resolved_config,
    resolved_plan,
)
from optimize.store.tables import BaseModelSelection
from optimize.training.admission.resolve import admit
from optimize.training.engines.harness import common_arguments
from optimize.training.methods import method_for

MODEL = "optimize/tiny-llama-3.2"


@pytest.fixture
def session(admission_session):
    return admission_session


def admitted(session, document):
    entry = load_catalog().find(document["baseModel"])
    selection = BaseModelSelection(entry_id=entry.id, repository=entry.repository, commit="c" * 40,
                                   content_digest="d" * 64, source="import", path="/nowhere", selected_at=utcnow())
    return admit(session, parse_plan(document), document, entry, selection, [])


PLANS = {
    "sft": {"dataset": "chat", "hyperparams": {"optimizer": {"learningRate": 0.002}}, "smoke": {"rows": 4}},
    "dpo": {"dataset": "pairs", "method": "dpo", "preference": {"beta": 0.2}},
    "grpo": {"dataset": "chat", "method": "grpo", "rlHyperparams": {"klBeta": 0.1},
             "reward": {"terms": [{"kind": "contains"}, {"kind": "exact", "weight": 2}, {"kind": "contains"}]}},
    "gspo": {"dataset": "chat", "method": "gspo", "reward": {"terms": [{"kind": "length", "target": 10, "max": 40}]}},
}
MODELS = {"sft": ResolvedSft, "dpo": ResolvedDpo, "grpo": ResolvedReinforcement, "gspo": ResolvedReinforcement}


def document(config: dict) -> dict:
    return {"kind": "run", "project": "proj", "baseModel": MODEL, "config": config,
            "execution": {"deviceProfile": "cpu", "saveEvery": 2}}


def spec_of(resolved: ResolvedPlan) -> dict:
    """The worker's spec as the server builds it from the run row and the worker reads it (`schemas.jobs`)."""
    stored = resolved.document()  # the run row's `resolved` column
    ignored = {"path": "/nowhere", "rows": 10, "objects": []}
    return RunSpec.model_validate({
        "runId": "r", "attempt": 1, "project": "proj", "method": stored["config"]["method"],
        "config": stored["config"], "execution": stored["execution"], "devices": ["cpu"], "leaseSeconds": 60,
        "dataset": {"digest": "d", "rows": ignored["rows"], "objects": ignored["objects"]}, "validation": None,
        "model": {"id": MODEL, "repository": "r", "family": "llama3", "commit": "c", "path": ignored["path"],
                  "chatTemplate": None},
        "resume": None, "branch": None}).wire()


@pytest.mark.parametrize("method", sorted(PLANS))
def test_a_resolved_plan_of_each_method_round_trips_through_the_worker_s_spec(session, method):
    resolved = admitted(session, document(PLANS[method])).resolved
    assert type(resolved.config) is MODELS[method] and resolved.config.method == method
    spec = spec_of(resolved)
    assert ResolvedPlan.model_validate({"config": spec["config"], "execution": spec["execution"]}) == resolved
    assert resolved_config(spec["config"]) == resolved.config
    assert resolved_plan(resolved.document()) == resolved  # the run row's JSON reads back into the same model


def test_the_stored_json_is_the_one_runs_always_stored(session):
    """Every key of the plan's config, hyperparams null for a reinforcement run, and what admission adds to a term
    only on terms of its kind: the JSON `runs get` showed before the resolved plan was typed."""
    grpo = admitted(session, document(PLANS["grpo"])).resolved.document()["config"]
    assert set(grpo) == {"dataset", "method", "hyperparams", "seed", "maxSeqLength", "model", "liger", "data", "loss",
                         "validation", "preference", "rlHyperparams", "reward", "smoke", "checks"}
    assert grpo["hyperparams"] is None and grpo["rlHyperparams"]["importanceSampling"] == "token"
    assert [t["name"] for t in grpo["reward"]["terms"]] == ["contains", "exact", "contains2"]
    assert set(grpo["reward"]["terms"][0]) == set(parse_plan(document(PLANS["grpo"])).config.reward.terms[0]
                                                  .model_dump(by_alias=True))
    sft = admitted(session, document(PLANS["sft"])).resolved.document()["config"]
    assert sft["rlHyperparams"] is None and sft["reward"] is None and sft["preference"]["fusedLoss"] is None
    assert sft["model"] == {"precision": "fp32", "gradientCheckpointing": False, "attentionImplementation": "sdpa",
                            "adapter": "lora"}


def test_a_run_stored_before_loads_with_its_rule_and_judge_terms():
    stored = {"config": {
        "dataset": "proj/chat:v1", "method": "grpo", "hyperparams": None, "seed": 0, "maxSeqLength": 512,
        "model": {"precision": "fp32", "gradientCheckpointing": False, "attentionImplementation": "sdpa"},
        "liger": {}, "data": {"truncation": "error"},
        "loss": {"assistantTurns": "final", "trainOnToolCalls": True, "explicitLossMaskColumn": None},
        "validation": {"dataset": None}, "preference": {"beta": 0.1, "lossType": "sigmoid", "fusedLoss": None},
        "rlHyperparams": {"lora": {"rank": 8, "alpha": 16, "dropout": 0.05, "targets": "all-linear",
                                   "adaptExperts": False},
                          "optimizer": {"learningRate": 1e-05, "weightDecay": 0.0},
                          "training": {"epochs": 1, "maxSteps": 4, "batchSize": 2, "gradientAccumulation": 1,
                                       "warmupSteps": 0, "validationFrequencySteps": None},
                          "klBeta": 0.04, "temperature": 0.7, "generations": 4, "maxCompletionLength": 128,
                          "importanceSampling": "sequence"},
        "reward": {"terms": [
            {**TERM, "kind": "rule", "name": "mine", "bundle": "proj/b:v3", "function": "m:f",
             "bundleSha256": "a" * 64},
            {**TERM, "kind": "judge", "name": "judge", "model": "proj/j:v1", "judgeReference": "proj/j:v1",
             "judgeBaseEntryId": MODEL, "judgeBaseCommit": "c" * 40, "judgeManifestDigest": None}],
            "aggregation": "sum"},
        "smoke": None, "checks": {"reference": {"mean_logprob_error": None, "max_logprob_error": None,
                                                "fp32_max_logprob_error": None}}},
        "execution": {"deviceProfile": "cpu", "gpus": 1, "sharding": None, "saveEvery": None, "keepAdapters": None,
                      "keepTrainingStates": None, "resumableSaveEvery": 10, "resumableSaveMinutes": 5,
                      "maxAttempts": 3, "pauseAtStep": None, "stopWhen": None}}
    plan = resolved_plan(stored)
    rule, judge = plan.config.reward.terms
    assert rule.bundle_sha256 == "a" * 64 and judge.judge_base_entry_id == MODEL and judge.judge_manifest_digest is None
    assert plan.document() == stored
    local = rule.model_copy(update={"bundle_path": "/tmp/b.zip"})  # the worker's own copy names its files
    assert local.member_spec()["bundlePath"] == "/tmp/b.zip" and "bundlePath" not in rule.member_spec()


TERM = {"weight": 1.0, "field": None, "pattern": None, "caseSensitive": None, "tolerance": None, "target": None,
        "max": None, "bundle": None, "function": None, "model": None, "instructions": None, "clip": None}

PLAN_FILE = """
kind: run
project: proj
baseModel: {model}
config:
  dataset: {dataset}
  method: {method}
  maxSeqLength: 384
  {section}:
    optimizer: {{learningRate: 0.0123}}
{extra}
execution: {{deviceProfile: cpu}}
"""


@pytest.mark.parametrize("method, dataset, section, extra", [
    ("sft", "chat", "hyperparams", ""),
    ("dpo", "pairs", "hyperparams", "  preference: {beta: 0.3}"),
    ("grpo", "chat", "rlHyperparams", "    klBeta: 0.07\n  reward: {terms: [{kind: contains}]}"),
])
def test_learning_rate_kl_beta_and_max_seq_length_reach_the_trl_config(session, tmp_path, method, dataset, section,
                                                                      extra):
    """From the plan file through admission and the worker's spec to the TRL config object the method builds."""
    plan = load_plan_text(PLAN_FILE.format(model=MODEL, dataset=dataset, method=method, section=section,
                                           extra=extra))
    config = resolved_config(spec_of(admitted(session, plan).resolved)["config"])
    recipe = method_for(method)
    args = recipe.arguments(config, common_arguments(config, tmp_path, steps=3, save_every=3, offset=0,
                                                     evaluates=False, cuda=False), cuda=False)
    assert args.learning_rate == 0.0123
    if method == "grpo":
        assert args.beta == 0.07 and args.num_generations == config.rl_hyperparams.generations
        fitter = recipe.fitter(None, config)  # a prompt's budget: maxSeqLength less the completion's
        assert fitter.limit == 384 and fitter.budget == 384 - config.rl_hyperparams.max_completion_length
    else:
        assert args.max_length == 384
    if method == "dpo":
        assert args.beta == 0.3


def test_a_branch_states_its_parent_s_resolved_plan_as_a_plan(session):
    """A branch's plan comes from its parent's typed resolved plan: the datasets at the versions it trained on, the
    reward terms as a plan states them (a judge naming the model it was judged by), no hyperparams for a
    reinforcement run, the overrides over them; it is a valid plan that admission resolves to the parent's settings
    but for what the overrides change."""
    from optimize.store.tables import Run
    from optimize.training.server.branching import child_document

    parent_admitted = admitted(session, document(PLANS["grpo"]))
    resolved = parent_admitted.resolved
    judge = resolved.config.reward.terms[0].model_copy(update={
        "kind": "judge", "model": "proj/j", "judge_reference": "proj/j:v2", "judge_base_entry_id": MODEL,
        "judge_base_commit": "c" * 40, "judge_manifest_digest": None})
    stored = resolved.model_copy(update={"config": resolved.config.model_copy(update={
        "reward": resolved.config.reward.model_copy(update={"terms": [judge]})})}).document()
    parent = Run(id="p" * 32, project="proj", method="grpo", base_entry_id=MODEL, model_name="m", resolved=stored,
                 dataset_reference="proj/chat:v1", validation_reference=None)
    child = child_document(parent, {"rlHyperparams": {"optimizer": {"learningRate": 0.5}}}, max_steps=3, epochs=None)
    config = child["config"]
    assert "hyperparams" not in config and config["dataset"] == "proj/chat:v1"
    assert config["reward"]["terms"][0]["model"] == "proj/j:v2" and "judgeReference" not in config["reward"]["terms"][0]
    plan = parse_plan(child)
    assert plan.config.rl_hyperparams.optimizer.learning_rate == 0.5
    assert plan.config.rl_hyperparams.training.max_steps == 3
    assert plan.config.rl_hyperparams.kl_beta == resolved.config.rl_hyperparams.kl_beta == 0.1
    child_plan = admitted(session, {**child, "config": {**config, "reward": PLANS["grpo"]["reward"]}}).resolved
    assert child_plan.config.model == resolved.config.model and child_plan.config.method == "grpo"
    assert child_plan.execution == resolved.execution


def test_a_branch_into_another_method_records_the_lora_settings_of_the_adapter_it_trains(session):
    """A supervised rank-16 adapter trained on by grpo (a weights branch): the child's plan and resolved config
    say rank 16, the adapter that trains, not the reinforcement defaults."""
    from optimize.store.tables import Run
    from optimize.training.server.branching import child_document

    lora = {"rank": 16, "alpha": 32, "dropout": 0.0, "targets": "all-linear"}
    parent_plan = {**PLANS["sft"], "hyperparams": {**PLANS["sft"]["hyperparams"], "lora": lora}}
    stored = admitted(session, document(parent_plan)).resolved.document()
    parent = Run(id="q" * 32, project="proj", method="sft", base_entry_id=MODEL, model_name="m", resolved=stored,
                 dataset_reference="proj/chat:v1", validation_reference=None)
    child = child_document(parent, {"method": "grpo", "reward": PLANS["grpo"]["reward"]}, max_steps=2, epochs=None)
    assert "hyperparams" not in child["config"] and child["config"]["rlHyperparams"]["lora"]["rank"] == 16
    resolved = admitted(session, child).resolved
    assert (resolved.config.rl_hyperparams.lora.rank, resolved.config.rl_hyperparams.lora.alpha) == (16, 32)
