"""`training.server.loss_compare`: two sft runs' training losses window by window, on metric points built here.

Windows of `window` updates with both runs' mean loss and the difference RUN − BASELINE, over the span both
reached; the verdict from the weighted mean difference against the margin; the first window beyond the margin in
either direction; a gradient-norm spike injected at one update, flagged by run and step with the norm and the
median; windows aligned by tokens seen; and the refusals (another method, another plan, no logged loss, no token
count).
"""

from __future__ import annotations

import pytest

from optimize.core.errors import Refused
from optimize.training.server.loss_compare import Side, compare, plan_differences, plan_facts

RESOLVED = {"config": {"method": "sft", "dataset": "p/chat:v1", "seed": 0, "maxSeqLength": 256,
                       "hyperparams": {"optimizer": {"learningRate": 0.01}, "training": {"maxSteps": 16}},
                       "model": {"precision": "fp32"}, "validation": {"dataset": None}},
            "execution": {"deviceProfile": "cpu", "saveEvery": 6}}


def facts(dataset=("p/chat:v1", "sha256:aa"), resolved=RESOLVED, commit="c0ffee"):
    return plan_facts("optimize/tiny-llama-3.2", commit, dataset, None, resolved)


def side(run_id: str, losses: list[float], norms: list[float] | None = None, tokens: list[int] | None = None,
         method: str = "sft", plan=None, first_step: int = 1) -> Side:
    points = []
    for index, loss in enumerate(losses):
        point = {"step": first_step + index, "loss": loss, "learningRate": 0.01}
        if norms is not None:
            point["gradNorm"] = norms[index]
        if tokens is not None:
            point["tokens"] = tokens[index]
        points.append(point)
    return Side(run_id=run_id, method=method, phase="COMPLETED", project="p", points=points,
                plan=facts() if plan is None else plan)


def test_windows_and_differences_over_the_span_both_reached():
    run = side("r" * 32, [2.0] * 10 + [1.0] * 10 + [0.5] * 5)  # 25 updates
    baseline = side("b" * 32, [2.5] * 10 + [1.0] * 20)  # 30 updates: compared up to step 25
    answer = compare(run, baseline, window=10).model_dump(by_alias=True)
    assert [(w["window"], w["runSteps"], w["baselineSteps"], w["updates"]) for w in answer["windows"]] == [
        (1, [1, 10], [1, 10], 10), (2, [11, 20], [11, 20], 10), (3, [21, 25], [21, 25], 5)]
    assert [round(w["difference"], 6) for w in answer["windows"]] == [-0.5, 0.0, -0.5]
    assert [w["runLoss"] for w in answer["windows"]] == [2.0, 1.0, 0.5]
    assert [w["baselineLoss"] for w in answer["windows"]] == [2.5, 1.0, 1.0]
    assert answer["windowsCompared"] == 3
    assert answer["meanDifference"] == pytest.approx((-0.5 * 10 + 0 + -0.5 * 5) / 25)
    assert answer["verdict"] == "better"
    assert answer["run"]["updates"] == 25 and answer["baseline"]["lastStep"] == 30
    assert answer["planDifferences"] == [] and answer["acrossPlans"] is False
    assert "tokens" not in answer["windows"][0]


def test_the_verdict_against_the_margin():
    baseline = side("b" * 32, [1.0] * 20)
    assert compare(side("r" * 32, [1.1] * 20), baseline).verdict == "worse"
    assert compare(side("r" * 32, [0.9] * 20), baseline).verdict == "better"
    assert compare(side("r" * 32, [1.04] * 20), baseline).verdict == "same"
    assert compare(side("r" * 32, [1.04] * 20), baseline, margin=0.01).verdict == "worse"
    assert compare(side("r" * 32, [1.0] * 20), baseline, margin=0).verdict == "same"


def test_the_first_window_beyond_the_margin_in_either_direction():
    baseline = side("b" * 32, [1.0] * 40)
    # windows of 5: +0.01, -0.02, -0.2 (first beyond 0.05), +0.3
    run = side("r" * 32, [1.01] * 5 + [0.98] * 5 + [0.8] * 5 + [1.3] * 5)
    beyond = compare(run, baseline, window=5).model_dump(by_alias=True)["firstBeyondMargin"]
    assert beyond["window"] == 3 and beyond["runSteps"] == [11, 15] and beyond["direction"] == "better"
    assert beyond["difference"] == pytest.approx(-0.2)
    worse_first = side("r" * 32, [1.0] * 5 + [1.06] * 5)
    beyond = compare(worse_first, baseline, window=5).first_beyond_margin
    assert (beyond.window, beyond.direction) == (2, "worse")
    assert compare(side("r" * 32, [1.0] * 10), baseline, window=5).first_beyond_margin is None


def test_an_injected_gradient_spike_is_flagged_by_run_and_step():
    norms = [1.0, 1.2, 0.9, 1.1, 1.0, 1.0, 9.5, 1.0, 1.1, 0.9]  # the spike: step 7
    run = side("r" * 32, [1.0] * 10, norms=norms)
    baseline = side("b" * 32, [1.0] * 10, norms=[2.0] * 9 + [5.9])  # 5.9 < 3 × 2.0: no spike
    answer = compare(run, baseline).model_dump(by_alias=True)
    assert answer["spikes"] == [{"run": "run", "runId": "r" * 32, "step": 7, "gradNorm": 9.5, "median": 1.0,
                                 "ratio": 9.5}]
    assert answer["run"]["medianGradNorm"] == 1.0 and answer["baseline"]["medianGradNorm"] == 2.0
    # a lower factor flags the baseline's last update too, after the run's
    lower = compare(run, baseline, spike_factor=2.5).spikes
    assert [(s.run, s.step) for s in lower] == [("run", 7), ("baseline", 10)]
    # grad_norm (TRL's own name) is read as well; a run that logged no norm has no median and no spikes
    renamed = Side(run_id="r" * 32, method="sft", phase="RUNNING", project="p", plan=facts(),
                   points=[{"step": i + 1, "loss": 1.0, "grad_norm": n} for i, n in enumerate(norms)])
    assert [s.step for s in compare(renamed, side("b" * 32, [1.0] * 10)).spikes] == [7]
    assert compare(renamed, side("b" * 32, [1.0] * 10)).baseline.median_grad_norm is None


def test_alignment_by_tokens_seen():
    # the run sees twice the tokens an update: by tokens, its update 5 lines up with the baseline's update 10
    run = side("r" * 32, [2.0] * 5 + [1.0] * 5, tokens=[200 * (i + 1) for i in range(10)])
    baseline = side("b" * 32, [2.0] * 10 + [1.5] * 10, tokens=[100 * (i + 1) for i in range(20)])
    by_step = compare(run, baseline, window=10)
    assert [round(w.difference, 6) for w in by_step.windows] == [-0.5]  # step 1-10: 1.5 - 2.0
    answer = compare(run, baseline, window=10, align="tokens").model_dump(by_alias=True)
    assert [(w["tokens"], w["runSteps"], w["baselineSteps"]) for w in answer["windows"]] == [
        ([0, 1000], [1, 5], [1, 10]), ([1000, 2000], [6, 10], [11, 20])]
    assert [round(w["difference"], 6) for w in answer["windows"]] == [0.0, -0.5]
    assert answer["align"] == "tokens" and answer["run"]["tokens"] == 2000 and answer["baseline"]["tokens"] == 2000
    # compared up to the fewest tokens both reached
    short = side("r" * 32, [1.0] * 3, tokens=[200, 400, 600])
    assert [w.tokens for w in compare(short, baseline, window=10, align="tokens").windows] == [[0, 600]]


def test_align_by_tokens_refused_where_no_token_count_was_logged():
    run = side("r" * 32, [1.0] * 4, tokens=[10, 20, 30, 40])
    baseline = side("b" * 32, [1.0] * 4)
    with pytest.raises(Refused) as refused:
        compare(run, baseline, align="tokens")
    assert f"run {'b' * 12} logged no token count (tokens)" in refused.value.message
    assert "--align step" in refused.value.hint
    assert compare(run, baseline).verdict == "same"  # by step it compares


@pytest.mark.parametrize("method", ["dpo", "grpo", "gspo"])
def test_another_method_is_refused_naming_it(method):
    with pytest.raises(Refused) as refused:
        compare(side("r" * 32, [1.0], method=method), side("b" * 32, [1.0]))
    assert f"run {'r' * 12} is a {method} run" in refused.value.message and "sft" in refused.value.message
    with pytest.raises(Refused) as refused:
        compare(side("r" * 32, [1.0]), side("b" * 32, [1.0], method=method))
    assert f"baseline {'b' * 12} is a {method} run" in refused.value.message


def test_a_run_with_no_logged_loss_yet_is_refused_naming_it():
    waiting = Side(run_id="w" * 32, method="sft", phase="QUEUED", project="p", points=[], plan=facts())
    with pytest.raises(Refused) as refused:
        compare(side("r" * 32, [1.0]), waiting)
    assert f"run {'w' * 12} has logged no training loss yet (QUEUED)" in refused.value.message
    only_norms = Side(run_id="w" * 32, method="sft", phase="RUNNING", project="p", plan=facts(),
                      points=[{"step": 1, "gradNorm": 1.0}])
    with pytest.raises(Refused, match="has logged no training loss yet"):
        compare(only_norms, side("b" * 32, [1.0]))


def test_runs_of_another_plan_are_refused_unless_across_plans():
    other_dataset = side("r" * 32, [1.0] * 3, plan=facts(dataset=("q/chat:v2", "sha256:bb")))
    other_length = side("r" * 32, [1.0] * 3, plan=facts(resolved={
        **RESOLVED, "config": {**RESOLVED["config"], "maxSeqLength": 128}}))
    baseline = side("b" * 32, [1.0] * 3)
    with pytest.raises(Refused) as refused:
        compare(other_dataset, baseline)
    assert "are runs of different plans" in refused.value.message
    assert "config.dataset (q/chat:v2 vs p/chat:v1)" in refused.value.message
    assert "--across-plans" in refused.value.hint
    with pytest.raises(Refused, match=r"config\.maxSeqLength \(128 vs 256\)"):
        compare(other_length, baseline)
    with pytest.raises(Refused, match=r"baseModel \(optimize/tiny-llama-3\.2@other vs "
                                      r"optimize/tiny-llama-3\.2@c0ffee\)"):
        compare(side("r" * 32, [1.0], plan=facts(commit="other")), baseline)
    answer = compare(other_dataset, baseline, across_plans=True)
    assert answer.across_plans is True and answer.plan_differences == ["config.dataset (q/chat:v2 vs p/chat:v1)"]


def test_hyperparams_execution_and_a_dataset_copy_are_one_plan():
    changed = {"config": {**RESOLVED["config"], "hyperparams": {"optimizer": {"learningRate": 0.001}}},
               "execution": {"deviceProfile": "cpu", "saveEvery": 2}}
    copy = facts(dataset=("elsewhere/chat:v3", "sha256:aa"), resolved=changed)  # the same rows, another project
    assert plan_differences(side("r" * 32, [1.0], plan=copy), side("b" * 32, [1.0])) == []
    assert compare(side("r" * 32, [1.0], plan=copy), side("b" * 32, [1.0])).across_plans is False
