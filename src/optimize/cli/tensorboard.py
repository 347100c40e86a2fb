"""`akka training runs tensorboard RUN [--dir DIR] [--port 6006] [--sync-only]`: a run's metrics as TensorBoard
event files, then `tensorboard --logdir DIR`.

The metrics are read over the API (`GET /v1/training/runs/{id}/metrics`), the run's and each of its ancestors' (a
branch is shown beside the runs it came from), and written with the `tensorboard` package's own event file writer
under TRL's names (`optimize.core.tracker_names`: `train/loss`, `train/learning_rate`, `eval/loss`, …). Each run has
a folder of its own, a branch's inside its parent's: `DIR/PROJECT/ROOT12[/BRANCH12…]`, so TensorBoard lists
`PROJECT/ROOT12` and `PROJECT/ROOT12/BRANCH12` side by side.

A sync is idempotent. A folder's `.optimize-tensorboard.json` lists the points its event files hold (kind, step,
attempt and a digest of the values) and the files. A sync whose points extend that list appends the new points in
one more event file; one with nothing new writes nothing; one where an earlier point changed (a resumed run trains
the updates after its save again) or a file is not the one listed (a sync that stopped half-way) writes the folder
again from scratch.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from optimize.cli.common import client_for, command, fail
from optimize.cli.output import CommandFailed, Output, console
from optimize.core.clock import from_iso
from optimize.core.tracker_names import numeric_values, tensorboard_tag

STATE = ".optimize-tensorboard.json"
EVENTS = "tfevents"  # TensorBoard reads the files whose name holds this
DEFAULT_DIR = "tensorboard"
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED")
RESYNC_SECONDS = 15.0
INSTALL_HINT = "install it with: pip install 'optimize[trackers]' (or pip install tensorboard==2.21.0)"


def add_tensorboard_command(app: typer.Typer) -> None:
    @command(app, "tensorboard")
    def tensorboard(
        out: Output,
        run: Annotated[str, typer.Argument(help="Run id or prefix.")],
        folder: Annotated[Path, typer.Option("--dir", "--logdir", help="Where the event files go: a folder per run "
                                             f"under DIR/PROJECT (default: ./{DEFAULT_DIR}); --logdir is TensorBoard's "
                                             "own name for it.")] = Path(DEFAULT_DIR),
        port: Annotated[int, typer.Option("--port", min=0, max=65535, help="TensorBoard's port.")] = 6006,
        sync_only: Annotated[bool, typer.Option("--sync-only", help="Write the event files; start no "
                                                "TensorBoard.")] = False,
    ) -> None:
        """Mirror the run's metrics (and its ancestors', for a branch) into TensorBoard event files under DIR, then
        start `tensorboard --logdir DIR --port PORT`, syncing again every 15 s while the run is open (Ctrl-C stops
        it). Syncing again adds only what is new."""
        _check_installed()
        root = folder.expanduser().resolve()
        with client_for(out) as api:
            synced = sync(api, run, root)
            out.emit({"dir": str(root), "runs": synced, "tensorboard": None if sync_only else
                      {"port": port, "url": f"http://localhost:{port}/"}}, _render)
            if not sync_only:
                _serve(api, out, run, root, port, synced)


def sync(api: Any, run: str, root: Path) -> list[dict[str, Any]]:
    """Write the event files of `run` and of its ancestors; one summary per run, the oldest ancestor first."""
    chain = [api.runs.get(run)]
    while chain[-1].get("parentRunId") and len(chain) < 100:
        chain.append(api.runs.get(chain[-1]["parentRunId"]))
    chain.reverse()
    folder = root / _safe(chain[0]["project"])
    synced = []
    for item in chain:
        folder = folder / item["runId"][:12]
        synced.append(sync_run(api.runs.metrics(item["runId"]), item, folder))
    return synced


def sync_run(metrics: dict[str, Any], run: dict[str, Any], folder: Path) -> dict[str, Any]:
    """Bring one run's folder up to its metrics: append what is new, or write it again when its past changed."""
    points = [p for p in (*metrics["steps"], *metrics["validation"])]
    points.sort(key=lambda p: (p["step"], p["kind"] != "train"))
    prints = [_fingerprint(p) for p in points]
    folder.mkdir(parents=True, exist_ok=True)
    state = _read_state(folder)
    files = sorted(p.name for p in folder.iterdir() if p.is_file() and EVENTS in p.name)
    known = state.get("points") or []
    if state.get("runId") == run["runId"] and files == state.get("files") and prints[:len(known)] == known:
        action, start = ("unchanged" if len(known) == len(prints) else "extended"), len(known)
    else:
        action, start = ("written" if not files and not state else "rewritten"), 0
        for name in files:
            (folder / name).unlink()
        files = []
        _write_state(folder, {"runId": run["runId"], "points": [], "files": []})
    fresh = points[start:]
    if fresh:
        files.append(_write_events(folder, fresh))
        _write_state(folder, {"runId": run["runId"], "points": prints, "files": sorted(files)})
    return {"runId": run["runId"], "project": run["project"], "parentRunId": run.get("parentRunId"),
            "phase": run["phase"], "folder": str(folder), "steps": len(metrics["steps"]),
            "validation": len(metrics["validation"]), "written": len(fresh), "action": action}


def _write_events(folder: Path, points: list[dict[str, Any]]) -> str:
    """One event file of `points`, each figure a scalar at its step and the time it was logged; its name."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    before = {p.name for p in folder.iterdir()}
    writer = EventFileWriter(str(folder), max_queue_size=1000, filename_suffix=".optimize")
    try:
        for point in points:
            values = [Summary.Value(tag=tensorboard_tag(point["kind"], name), simple_value=value)
                      for name, value in sorted(numeric_values(point).items())]
            if values:
                writer.add_event(Event(wall_time=from_iso(point["at"]).timestamp(), step=point["step"],
                                       summary=Summary(value=values)))
    finally:
        writer.close()
    (written,) = {p.name for p in folder.iterdir()} - before
    return written


def _fingerprint(point: dict[str, Any]) -> str:
    values = json.dumps(numeric_values(point), sort_keys=True)
    digest = hashlib.sha256(values.encode()).hexdigest()[:16]
    return f"{point['kind']}:{point['step']}:{point['attempt']}:{digest}"


def _read_state(folder: Path) -> dict[str, Any]:
    try:
        state = json.loads((folder / STATE).read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def _write_state(folder: Path, state: dict[str, Any]) -> None:
    partial = folder / f"{STATE}.partial"
    partial.write_text(json.dumps(state))
    os.replace(partial, folder / STATE)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "_"


def _check_installed() -> None:
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        fail("the tensorboard package is not installed", INSTALL_HINT)


def _serve(api: Any, out: Output, run: str, root: Path, port: int, synced: list[dict[str, Any]]) -> None:
    """`tensorboard --logdir ROOT --port PORT` in the foreground; the run synced again while it is open."""
    command = [sys.executable, "-m", "tensorboard.main", "--logdir", str(root), "--port", str(port)]
    try:
        board = subprocess.Popen(command)
    except OSError as error:
        fail(f"cannot start tensorboard: {error.strerror}", INSTALL_HINT)
    out.note(f"TensorBoard on http://localhost:{port}/ (logdir {root}); Ctrl-C stops it.")
    open_run = synced[-1]["phase"] not in TERMINAL

    def stopped(signum, frame):  # SIGTERM as Ctrl-C: TensorBoard is stopped with the command, never left behind
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stopped)
    try:
        while board.poll() is None:
            time.sleep(RESYNC_SECONDS if open_run else 1.0)
            if open_run and board.poll() is None:
                try:
                    open_run = sync(api, run, root)[-1]["phase"] not in TERMINAL
                except Exception as error:  # a server that does not answer for a while: TensorBoard goes on
                    out.note(f"[yellow]sync failed:[/] {error}")
    except KeyboardInterrupt:
        board.terminate()
        board.wait(10)
        console(stderr=True).print("Stopped TensorBoard.")
        raise CommandFailed(130) from None
    if board.returncode:
        fail(f"tensorboard exited with status {board.returncode}",
             f"is port {port} taken? pick another with --port")


def _render(con, data) -> None:
    for item in data["runs"]:
        what = {"unchanged": "nothing new", "extended": f"{item['written']} new point(s) appended",
                "written": f"{item['written']} point(s) written",
                "rewritten": f"{item['written']} point(s) written again (earlier points changed)"}[item["action"]]
        con.print(f"{item['runId'][:12]} ({item['phase'].title()}, {item['steps']} steps, {item['validation']} "
                  f"validation passes) -> {item['folder']}: {what}")
    if data["tensorboard"] is None:
        con.print(f"View them with: tensorboard --logdir {data['dir']}")
