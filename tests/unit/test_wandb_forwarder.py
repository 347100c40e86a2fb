"""The W&B forwarder (`optimize.trackers.wandb_forwarder`) in this process, on a real store, through W&B's own client in
offline mode, its run files read back with W&B's record type: the updates a later attempt trains again are kept beside
the first ones (W&B's own step counts points; `train/global_step` is the update), a run the server stops in the middle
is finished and, by a server started again, written again whole in one folder from the store, and a run that ended is
not opened again."""

from __future__ import annotations

import os

import pytest

from tests.tracker_runs import read_wandb_run, wandb_services
from tests.unit.test_tracker_sweeper import add_run, put, set_phase, store  # noqa: F401 - the store fixture

pytest.importorskip("wandb")

from optimize.trackers.wandb_forwarder import WandbForwarder  # noqa: E402


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    """Nothing of W&B's may reach a network or the user's home."""
    for name, value in {"WANDB_MODE": "offline", "WANDB_ERROR_REPORTING": "false",
                        "WANDB_CONFIG_DIR": str(tmp_path / "config"), "WANDB_CACHE_DIR": str(tmp_path / "cache"),
                        "WANDB_DATA_DIR": str(tmp_path / "data"), "WANDB_API_KEY": ""}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("WANDB_PROJECT", raising=False)


def folders(root, run_id: str) -> list:
    return sorted((root / "wandb").glob(f"offline-run-*-{run_id}*"))


def steps(found: dict) -> list[tuple[int, float]]:
    return [(row["train/global_step"], row["train/loss"]) for row in found["history"] if "train/loss" in row]


def test_steps_trained_again_are_kept_and_an_ended_run_is_not_opened_again(store, tmp_path):  # noqa: F811
    root = tmp_path / "w"
    run = add_run(store)
    put(store, run, "train", 1, 1, 2, 3, 4)
    forwarder = WandbForwarder(store, "offline", root, every=0.01)
    try:
        forwarder.sweep()
        put(store, run, "train", 2, 3, 4, 5)  # restored the save at 2: 3 and 4 trained again (loss 2.0)
        put(store, run, "validation", 2, 5)
        set_phase(store, run, "COMPLETED")
        forwarder.sweep()
    finally:
        forwarder.close()
    assert wandb_services(os.getpid()) == []  # W&B's service process stopped with the forwarder
    (folder,) = folders(root, run)
    found = read_wandb_run(folder)
    assert steps(found) == [(1, 1.0), (2, 1.0), (3, 1.0), (4, 1.0), (3, 2.0), (4, 2.0), (5, 1.0)]
    assert [row["_step"] for row in found["history"]] == list(range(8))
    assert [(row["train/global_step"], row["eval/loss"]) for row in found["history"] if "eval/loss" in row] == \
        [(5, 1.0)]
    assert found["exit_code"] == 0 and found["summary"]["optimize.sent.train"] == "2:5"
    assert found["run"].project == "optimize-p"
    written = folder.joinpath(f"run-{run}.wandb").read_bytes()

    again = WandbForwarder(store, "offline", root, every=0.01)  # a server started again
    try:
        again.sweep()
    finally:
        again.close()
    assert folders(root, run) == [folder] and folder.joinpath(f"run-{run}.wandb").read_bytes() == written


def test_a_run_open_when_the_server_stops_is_written_again_whole_by_the_next(store, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("WANDB_PROJECT", "one-project")
    root = tmp_path / "w"
    run = add_run(store)
    put(store, run, "train", 1, 1, 2, 3)
    forwarder = WandbForwarder(store, "offline", root, every=0.01)
    try:
        forwarder.sweep()
    finally:
        forwarder.close()
    (first,) = folders(root, run)
    stopped = read_wandb_run(first)
    assert steps(stopped) == [(1, 1.0), (2, 1.0), (3, 1.0)] and stopped["exit_code"] == 0
    assert stopped["summary"]["optimize.phase"] == "TRAINING" and stopped["run"].project == "one-project"

    put(store, run, "train", 2, 3, 4)  # the next attempt, from the save at 2
    set_phase(store, run, "FAILED")
    again = WandbForwarder(store, "offline", root, every=0.01)
    try:
        again.sweep()
    finally:
        again.close()
    (folder,) = folders(root, run)  # the first removed (the same name within a second: W&B names it by the second)
    found = read_wandb_run(folder)
    assert steps(found) == [(1, 1.0), (2, 1.0), (3, 2.0), (4, 1.0)]  # as the store holds them, once each
    assert found["exit_code"] == 1 and found["summary"]["optimize.phase"] == "FAILED"
