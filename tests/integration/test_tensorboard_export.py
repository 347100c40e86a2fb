"""`akka training runs tensorboard RUN --sync-only`: the session's completed run (`completed_run`, on the shared
`sqlite_server`) written as TensorBoard event files, read back with TensorBoard's own reader and compared with the
run's metrics as the API answers them; a second sync (`--logdir`, TensorBoard's name for `--dir`) adds nothing.
The folder's append and rewrite paths are checked on made-up metrics (no server)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.conftest import Cli, headers_for

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def scalars(folder: str | Path, tag: str) -> list[tuple[int, float]]:
    reader = EventAccumulator(str(folder), size_guidance={"scalars": 0})  # 0: keep every point
    reader.Reload()
    return [(event.step, event.value) for event in reader.Scalars(tag)]


def event_files(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in folder.iterdir() if "tfevents" in p.name}


def test_event_files_hold_the_runs_metrics_and_a_second_sync_adds_nothing(completed_run, tmp_path, capsys):
    url, run_id = completed_run["url"], completed_run["run"]["runId"]
    cli = Cli(capsys, url)
    first = cli.json("training", "runs", "tensorboard", run_id[:12], "--dir", str(tmp_path / "tb"), "--sync-only")
    metrics = httpx.get(f"{url}/v1/training/runs/{run_id}/metrics", headers=headers_for(url)).json()
    (synced,) = first["runs"]
    folder = Path(synced["folder"])
    assert folder == tmp_path / "tb" / completed_run["project"] / run_id[:12]
    assert synced["action"] == "written" and first["tensorboard"] is None
    assert synced["written"] == len(metrics["steps"]) + len(metrics["validation"]) and len(metrics["steps"]) == 16

    steps = metrics["steps"]
    for tag, name in (("train/loss", "loss"), ("train/learning_rate", "learningRate"),
                      ("train/grad_norm", "gradNorm"), ("train/num_tokens", "tokens")):
        read = scalars(folder, tag)
        assert [s for s, _ in read] == [m["step"] for m in steps], tag
        # TensorBoard keeps a scalar as a float32
        assert [v for _, v in read] == pytest.approx([m[name] for m in steps], rel=1e-6), tag
    validation = scalars(folder, "eval/loss")
    assert validation and [s for s, _ in validation] == [m["step"] for m in metrics["validation"]]
    assert [v for _, v in validation] == pytest.approx([m["validationLoss"] for m in metrics["validation"]], rel=1e-6)

    files = event_files(folder)
    again = cli.json("training", "runs", "tensorboard", run_id, "--logdir", str(tmp_path / "tb"), "--sync-only")
    assert again["runs"][0]["action"] == "unchanged" and again["runs"][0]["written"] == 0
    assert event_files(folder) == files
    assert [s for s, _ in scalars(folder, "train/loss")] == [m["step"] for m in steps]

    text = cli.ok("training", "runs", "tensorboard", run_id, "--dir", str(tmp_path / "tb"), "--sync-only").out
    assert f"{run_id[:12]} (Completed, 16 steps" in text and "nothing new" in text


def point(step: int, loss: float, attempt: int = 1, kind: str = "train") -> dict:
    values = {"loss": loss, "learningRate": 0.01 / step} if kind == "train" else {"validationLoss": loss}
    return {"step": step, "kind": kind, "attempt": attempt, "at": f"2026-12-05T10:00:{step:02d}Z", **values}


def test_new_points_are_appended_and_a_changed_past_is_written_again(tmp_path):
    from optimize.cli.tensorboard import sync_run

    run = {"runId": "a" * 32, "project": "p", "phase": "TRAINING"}
    metrics = {"steps": [point(1, 3.0), point(2, 2.0)], "validation": []}
    assert sync_run(metrics, run, tmp_path)["action"] == "written"
    metrics["steps"].append(point(3, 1.5))
    metrics["validation"].append(point(3, 1.7, kind="validation"))
    grown = sync_run(metrics, run, tmp_path)
    assert (grown["action"], grown["written"]) == ("extended", 2) and len(event_files(tmp_path)) == 2
    assert scalars(tmp_path, "train/loss") == [(1, 3.0), (2, 2.0), (3, 1.5)]
    assert scalars(tmp_path, "eval/loss") == [(3, pytest.approx(1.7))]
    assert sync_run(metrics, run, tmp_path)["action"] == "unchanged"

    # resumed from its save at step 1: steps 2 and 3 trained again by attempt 2
    metrics = {"steps": [point(1, 3.0), point(2, 2.5, 2), point(3, 1.25, 2)], "validation": []}
    again = sync_run(metrics, run, tmp_path)
    assert (again["action"], again["written"]) == ("rewritten", 3) and len(event_files(tmp_path)) == 1
    assert scalars(tmp_path, "train/loss") == [(1, 3.0), (2, 2.5), (3, 1.25)]

    stray = tmp_path / "events.out.tfevents.1.host.1.stray"  # a sync that stopped before it recorded its file
    stray.write_bytes(b"")
    assert sync_run(metrics, run, tmp_path)["action"] == "rewritten" and not stray.exists()


def test_a_branch_is_written_inside_its_parents_folder(tmp_path):
    from optimize.cli.tensorboard import sync

    runs = {"p" * 32: {"runId": "p" * 32, "project": "proj", "phase": "COMPLETED", "parentRunId": None},
            "b" * 32: {"runId": "b" * 32, "project": "proj", "phase": "TRAINING", "parentRunId": "p" * 32}}
    metrics = {"p" * 32: [point(1, 3.0), point(2, 2.0)], "b" * 32: [point(1, 1.5)]}

    class Runs:
        def get(self, run):
            return runs[run]

        def metrics(self, run):
            return {"steps": metrics[run], "validation": []}

    class Api:
        runs = Runs()

    synced = sync(Api(), "b" * 32, tmp_path)
    assert [Path(s["folder"]) for s in synced] == [tmp_path / "proj" / ("p" * 12),
                                                   tmp_path / "proj" / ("p" * 12) / ("b" * 12)]
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    # TensorBoard's view of the logdir: the two runs side by side
    board = EventMultiplexer().AddRunsFromDirectory(str(tmp_path))
    board.Reload()
    assert sorted(board.Runs()) == [f"proj/{'p' * 12}", f"proj/{'p' * 12}/{'b' * 12}"]
    assert [e.value for e in board.Scalars(f"proj/{'p' * 12}", "train/loss")] == [3.0, 2.0]
    assert [e.value for e in board.Scalars(f"proj/{'p' * 12}/{'b' * 12}", "train/loss")] == [1.5]
