"""The guards' rule on sequences of updates, fed one update at a time as a run reports them: a run whose reward
falls from 1.02 to 0.33 in 6 updates while its KL rises from 0.01 to 0.37 is warned about both at its sixth update;
a noisy run that holds its reward is never warned about; too few updates give no verdict; `stopWhen`'s bounds are
met on the latest window's mean. Then the server's part, through the worker's report path into a migrated store:
each kind of warning recorded once with an event, a met stop recorded once and passed on in the worker's
instructions, nothing for a supervised run."""

from __future__ import annotations

import random

import pytest

from optimize.training.server.guards import KL_WARN, Update, anchor_of, judge, window_for

GONE_WRONG_REWARD = [1.02, 0.98, 0.95, 0.71, 0.52, 0.33]
GONE_WRONG_KL = [0.01, 0.08, 0.15, 0.23, 0.30, 0.37]


def updates(rewards, kls=None, spread=0.4) -> list[Update]:
    kls = kls or [None] * len(rewards)
    return [Update(step, reward, spread, kl) for step, (reward, kl) in enumerate(zip(rewards, kls, strict=True), 1)]


def verdicts(run: list[Update], window: int, **stop):
    """Each prefix of the run judged as the server judges it when that update's metrics arrive."""
    out = []
    for end in range(1, len(run) + 1):
        seen = run[:end]
        out.append(judge(anchor_of(seen, window), seen[-2 * window:], window, **stop))
    return out


def test_the_window_is_a_tenth_of_the_run_between_3_and_10_updates():
    assert [window_for(n) for n in (None, 6, 20, 45, 100, 5000)] == [3, 3, 3, 4, 10, 10]


def test_a_run_whose_reward_falls_and_kl_rises_is_warned_at_its_sixth_update():
    judged = verdicts(updates(GONE_WRONG_REWARD, GONE_WRONG_KL), window=3)
    assert all(found == [] for found, _ in judged[:5])  # the KL window 3-5 is at 0.227, under the bound
    found, stop = judged[5]
    assert stop is None
    drop, kl = found
    assert drop["kind"] == "rewardDrop" and drop["window"] == [4, 6] and drop["step"] == 6
    assert drop["value"] == pytest.approx(0.52)
    assert drop["anchor"] == {"window": [1, 3], "reward": pytest.approx(0.983333, abs=1e-6)}
    assert drop["bound"] == pytest.approx(0.983333 * 0.75, abs=1e-5)
    assert drop["message"].startswith("the mean reward fell to 0.520 over updates 4–6, from 0.983 over updates 1–3")
    assert kl["kind"] == "klHigh" and kl["value"] == pytest.approx(0.30) and kl["bound"] == KL_WARN
    assert "the mean KL against the starting policy is 0.300 over updates 4–6, above 0.25" in kl["message"]


def test_a_noisy_run_that_holds_its_reward_is_never_warned_about():
    rng = random.Random(7)
    rewards = [0.5 + 0.004 * step + rng.uniform(-0.15, 0.15) for step in range(60)]
    kls = [min(0.02 + 0.002 * step + rng.uniform(0, 0.05), 0.2) for step in range(60)]
    for window in (3, 6, 10):
        assert all(found == [] and stop is None for found, stop in verdicts(updates(rewards, kls), window))


def test_a_reward_near_zero_is_judged_against_its_spread():
    # starts at 0.02 with completions 0.3 apart: a fall to -0.02 is noise, a fall to -0.2 is not
    start = [0.03, 0.01, 0.02]
    assert judge(anchor_of(updates(start, spread=0.3), 3), updates(start + [-0.02] * 3, spread=0.3), 3) == ([], None)
    found, _ = judge(anchor_of(updates(start, spread=0.3), 3), updates(start + [-0.2] * 3, spread=0.3), 3)
    assert [f["kind"] for f in found] == ["rewardDrop"]


def test_too_few_updates_give_no_verdict():
    run = updates([1.0, 0.0, 0.0, 0.0, 0.0], [5.0] * 5)
    assert anchor_of(run[:2], 3) is None
    assert judge(None, run[:2], 3, reward_below=10, kl_above=0) == ([], None)
    found, _ = judge(anchor_of(run, 3), run, 3)  # the latest window (3-5) overlaps the first (1-3): no drop yet
    assert [f["kind"] for f in found] == ["klHigh"]


def test_updates_without_a_figure_are_passed_over():
    run = [Update(1, 1.0, 0.1), Update(2, None), Update(3, 1.0, 0.1), Update(4, 1.0, 0.1)]
    assert anchor_of(run, 3) == {"window": [1, 4], "reward": 1.0, "spread": pytest.approx(0.1)}
    assert judge(None, run, 3, kl_above=0) == ([], None)  # klBeta 0: no KL reported, no KL verdict
    assert Update.of(5, {"reward": float("nan"), "rewardStd": True, "kl": 0.5}) == Update(5, None, None, 0.5)


def test_stop_bounds_are_met_on_the_latest_windows_mean():
    run = updates([0.9, 0.8, 0.7, 0.6], [0.01, 0.02, 0.03, 0.2])
    _, stop = judge(None, run, 3, reward_below=0.75)
    assert stop["kind"] == "rewardDropBelow" and stop["window"] == [2, 4] and stop["value"] == pytest.approx(0.7)
    assert stop["message"] == ("the mean reward over updates 2–4, 0.700, is below execution.stopWhen.rewardDropBelow "
                               "0.75")
    assert judge(None, run, 3, reward_below=0.7)[1] is None  # not below: at it
    _, stop = judge(None, run, 3, kl_above=0.05)
    assert stop["kind"] == "klAbove" and stop["message"] == ("the mean KL over updates 2–4, 0.083, is above "
                                                             "execution.stopWhen.klAbove 0.05")
    assert judge(None, run, 3, reward_below=0.75, kl_above=0.05)[1]["kind"] == "rewardDropBelow"  # reward first


# --- the server applies the rule as the worker's metrics arrive (training.server.reports) -------------------------


@pytest.fixture
def guarded(tmp_path):
    """A grpo run in TRAINING with its worker's lease, in a migrated store; `report(step, reward, kl)` sends one
    update's metrics through the worker's report path."""
    from types import SimpleNamespace

    from optimize.core.clock import iso, utcnow
    from optimize.jobs import leases
    from optimize.store.tables import Project, Run, RunAttempt
    from optimize.training.server import reports
    from tests.conftest import migrated_store

    store = migrated_store("sqlite", tmp_path)
    training = SimpleNamespace(store=store, lease_seconds=60)

    def start(stop_when=None, method="grpo"):
        now = utcnow()
        run_id = f"run{len(made):029d}"
        with store.transaction() as session:
            if not made:
                session.add(Project(name="p", archived=False, created_at=now))
            rl = {"training": {"maxSteps": 20, "batchSize": 2, "epochs": 1, "gradientAccumulation": 1}}
            session.add(Run(
                id=run_id, submission_id=run_id, submission_digest="d", project="p", method=method,
                phase="TRAINING", attempt=1, plan={}, sources={}, config_hash="h", base_entry_id="b",
                base_commit="c", dataset_reference="p/d:v1", dataset_digest="d", dataset_rows=40, model_name="m",
                device_profile="cpu", device_count=1, phase_times={"TRAINING": [[iso(now), None]]}, created_at=now,
                resolved={"config": {"method": method, "rlHyperparams": rl, "hyperparams": rl},
                          "execution": {"stopWhen": stop_when}},
                progress={"observedStep": 0, "totalSteps": 20}))
            session.flush()
            token = leases.grant(session, "run", run_id, 1, [], 60).token
            session.add(RunAttempt(run_id=run_id, number=1, lease_token=token, devices=[], state="active",
                                   started_at=now))
        made.append(run_id)

        def report(step, reward, kl=None):
            values = {"loss": 0.1, "reward": reward, "rewardStd": 0.4, **({"kl": kl} if kl is not None else {})}
            reports.report_metrics(training, run_id, token, [{"kind": "train", "step": step, "values": values}])
            with store.transaction() as session:
                return reports.instructions(session.get(Run, run_id))

        return run_id, report

    made: list[str] = []
    yield SimpleNamespace(store=store, start=start)
    store.dispose()


def shown(store, run_id):
    from sqlalchemy import select

    from optimize.store.tables import Event, Run
    from optimize.training.server.views import run_view

    with store.transaction() as session:
        events = [(e.kind, e.data) for e in session.scalars(
            select(Event).where(Event.subject == f"run:{run_id}", Event.kind.like("guard-%")).order_by(Event.id))]
        return run_view(session.get(Run, run_id)).model_dump(mode="json", by_alias=True), events


def test_the_server_records_each_kind_of_warning_once_as_metrics_arrive(guarded):
    run_id, report = guarded.start()
    for step, (reward, kl) in enumerate(zip(GONE_WRONG_REWARD + [0.2, 0.1], GONE_WRONG_KL + [0.4, 0.5],
                                            strict=True), 1):
        assert report(step, reward, kl)["stop"] is None  # no stopWhen: warnings only
        run, events = shown(guarded.store, run_id)
        if step == 5:
            assert run["guards"]["warnings"] == [] and events == []
            assert run["guards"]["window"] == 3 and run["guards"]["anchor"]["window"] == [1, 3]
    assert [w["kind"] for w in run["guards"]["warnings"]] == ["rewardDrop", "klHigh"]
    assert all(w["step"] == 6 and w["at"] for w in run["guards"]["warnings"])  # when first met, not since
    assert run["warnings"] == [w["message"] for w in run["guards"]["warnings"]]  # beside admission's, in words
    assert [kind for kind, _ in events] == ["guard-warning", "guard-warning"]
    assert events[0][1]["guard"] == "rewardDrop" and events[0][1]["message"] == run["warnings"][0]
    assert run["guards"]["stop"] is None and run["phase"] == "TRAINING"


def test_a_met_stop_when_is_recorded_once_and_passed_to_the_worker(guarded):
    run_id, report = guarded.start({"rewardDropBelow": 0.9, "klAbove": None})
    assert [report(step, 1.0)["stop"] for step in (1, 2, 3)] == [None, None, None]
    said = report(4, 0.5)  # updates 2-4: 0.833
    assert said["stop"] == ("the mean reward over updates 2–4, 0.833, is below execution.stopWhen.rewardDropBelow "
                            "0.9")
    report(5, 0.4)
    run, events = shown(guarded.store, run_id)
    assert run["guards"]["stop"]["step"] == 4 and run["guards"]["stop"]["kind"] == "rewardDropBelow"
    assert [kind for kind, _ in events] == ["guard-stop"]  # once, though update 5 meets it too
    assert run["warnings"] == []  # a stop is not a warning: runs get shows it on a line of its own


def test_other_methods_have_no_guards(guarded):
    run_id, report = guarded.start(method="sft")
    for step in range(1, 8):
        report(step, 1.0 if step < 4 else 0.0, 5.0)
    run, events = shown(guarded.store, run_id)
    assert run["guards"] is None and events == [] and run["warnings"] == []


def test_a_followed_run_s_headline_and_its_stopped_line_say_what_its_guards_found():
    from optimize.cli.commands.runs import _status_line, _stop_line

    stop = {"kind": "klAbove", "step": 7, "message": "the mean KL over updates 5–7, 0.600, is above "
                                                     "execution.stopWhen.klAbove 0.5"}
    warning = {"kind": "klHigh", "step": 6, "message": "the mean KL against the starting policy is 0.300"}
    run = {"runId": "a" * 32, "phase": "TRAINING", "terminal": False, "guards": {"warnings": [warning], "stop": stop}}
    assert _status_line(run) == (f"aaaaaaaaaaaa Training  — stopping: {stop['message']}  — warning: "
                                 f"{warning['message']}")
    assert _stop_line(run) == f"{stop['message']} (met at step 7); it saves at its next update and completes there"
    done = {**run, "phase": "COMPLETED", "terminal": True, "results": {"steps": 8}}
    assert _status_line(done) == f"aaaaaaaaaaaa Completed  — warning: {warning['message']}"
    assert _stop_line(done) == f"{stop['message']} (met at step 7); it completed at step 8 with the adapter trained " \
                               "to there"
    assert _status_line({"runId": "b" * 32, "phase": "TRAINING", "guards": None}) == "bbbbbbbbbbbb Training"
