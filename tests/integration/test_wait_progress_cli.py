"""Watching long work through the CLI (`wait`, `--wait`) against a real server, real workers and real training on
the stand-in model: plain lines when the output is no terminal (the CLI runs here as a subprocess with a pipe),
under `-o json` one document (the item as `get` answers it) and with `--events` a JSON line per status first,
Ctrl-C that stops only the following, and `runs get` showing the pre-flight estimate against the training time
measured. The terminal view is rendered in tests/unit/test_progress_view.py; what each mode prints against a
scripted stream (exit codes, Ctrl-C, usage errors) in tests/unit/test_follow.py."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import uuid

import pytest

from tests.conftest import as_a_terminal_starts_it, chat_row, write_jsonl
from tests.run_fixtures import MODEL, capitals_project, plan, write_plan

pytestmark = pytest.mark.integration


def akka(url: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """The CLI as a user's script runs it: its own process, its output a pipe (no terminal)."""
    return subprocess.run([sys.executable, "-m", "optimize", *args, "--server", url], capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def watched(sqlite_server, tmp_path_factory):
    """A project with a dataset no other test holds (so its analysis is measured here, not found done), analyzed
    through `datasets analyze --wait` before a short run is planned on it."""
    tmp = tmp_path_factory.mktemp("wait-progress")
    project = capitals_project(sqlite_server.url, tmp, "watch")
    tag = uuid.uuid4().hex[:8]
    rows = [chat_row(f"Say {tag} {n}.", f"{tag} {n}.") for n in range(40)]
    dataset = f"{project['name']}/fresh"
    done = akka(sqlite_server.url, "registry", "datasets", "register", dataset, "-f",
                str(write_jsonl(tmp / "fresh.jsonl", rows)))
    assert done.returncode == 0, done.stderr
    analyzed = akka(sqlite_server.url, "training", "datasets", "analyze", dataset, "--model", MODEL, "--wait")
    document = plan(project["name"], dataset)
    document["config"]["hyperparams"]["training"] = {"maxSteps": 8, "batchSize": 4}
    document["execution"]["saveEvery"] = 8
    return {**project, "dataset": dataset, "analyzed": analyzed, "plan": write_plan(tmp, document),
            "url": sqlite_server.url}


def test_an_analysis_followed_off_a_terminal_prints_the_rows_it_measured(watched):
    analyzed = watched["analyzed"]
    assert analyzed.returncode == 0, analyzed.stderr
    lines = analyzed.stdout.splitlines()
    followed = [line for line in lines if " rows measured " in line]
    assert followed and followed[-1].split("  ")[1] == "rows measured 40/40 (100%)", analyzed.stdout
    assert any(line.startswith("Analysis ") for line in lines)  # then the report, as `analyses` shows it


def test_ctrl_c_stops_following_and_the_run_goes_on(watched):
    url = watched["url"]
    process = subprocess.Popen([sys.executable, "-m", "optimize", "training", "runs", "start", "-f",
                                watched["plan"], "--force", "--wait", "--server", url],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=as_a_terminal_starts_it)
    try:
        first = _line_within(process, 120)
        # the analysis is done, so the estimate was recorded at submission: the ETA rests on it before any step
        assert "ETA " in first and first.endswith("from the pre-flight estimate"), first
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    run_id = first.split()[0]
    assert process.returncode == 130, (out, err)
    assert "Traceback" not in err
    assert f"Stopped following run {run_id}; the run goes on; follow it again with: akka training runs wait " \
           f"{run_id}." in err.replace("\n", " ").replace("  ", " "), err

    # it goes on: following it again, off a terminal, prints plain lines up to its end
    followed = akka(url, "training", "runs", "wait", run_id, "--exit-status")
    assert followed.returncode == 0, followed.stdout + followed.stderr
    lines = followed.stdout.splitlines()
    statuses = [line for line in lines if line.startswith(run_id)]
    assert statuses[-1].startswith(f"{run_id} Completed  steps 8/8 (100%)  loss "), followed.stdout
    assert "State" in lines and any(line.startswith("  Predicted") for line in lines)  # then the run, as `get` has it

    # `runs get` shows the estimate recorded at submission against the training time measured
    text = akka(url, "training", "runs", "get", run_id).stdout
    predicted = next(line for line in text.splitlines() if line.startswith("  Predicted"))
    assert "for 8 steps (" in predicted and "tokens/s per device measured by" in predicted, predicted
    assert "; actual " in predicted and "× the estimate)" in predicted, predicted
    run = json.loads(akka(url, "training", "runs", "get", run_id, "-o", "json").stdout)
    prediction = run["prediction"]
    assert prediction["steps"] == 8 and prediction["seconds"] > 0 and prediction["actualSeconds"] > 0
    assert prediction["analysisId"] == run["lengthCheck"]["datasets"][0]["analysisId"]
    # and the peak memory predicted at admission (measured only on a GPU: the cpu has no device counter)
    memory = run["memory"]
    assert memory["predicted"]["peakGiB"] > 0 and memory["predicted"]["gradientCheckpointing"] is False
    assert memory["measuredGiB"] is None and memory["ratio"] is None and memory["checkpointingReason"] is None
    line = next(line for line in text.splitlines() if line.startswith("  Memory"))
    assert f"predicted peak {memory['predicted']['peakGiB']:g} GiB per device" in line, line


def test_a_followed_run_under_json_is_one_document_the_run_as_get_answers_it(completed_run, sqlite_server):
    # completed_run was followed with `runs start --wait --exit-status -o json-compact` from its submission to its end
    assert len(completed_run["lines"]) == 1, completed_run["lines"]  # one document, no stream of states
    final = completed_run["run"]
    assert "event" not in final and final["phase"] == "COMPLETED"  # the run as `runs get` answers it
    # the run it recorded its estimate for (its analysis ran while it waited), and the time it took
    assert final["prediction"]["seconds"] > 0 and final["prediction"]["actualSeconds"] > 0

    # `-o json` on a later follow: one document, exactly what `runs get -o json` prints
    again = akka(sqlite_server.url, "training", "runs", "wait", final["runId"], "-o", "json")
    assert again.returncode == 0, again.stderr
    assert again.stdout == akka(sqlite_server.url, "training", "runs", "get", final["runId"], "-o", "json").stdout
    assert json.loads(again.stdout)["runId"] == final["runId"]


def test_an_estimate_of_a_completed_run_s_shape_is_scaled_by_how_fast_it_trained_here(completed_run, sqlite_server):
    # the same plan again: its dataset's analysis is done, so the estimate comes back at once, scaled by the runs
    # of its shape that completed on this server (the fixture's among them)
    url, project = sqlite_server.url, completed_run["project"]
    analyzed = akka(url, "training", "datasets", "analyze", f"{project}/chat:train", "-f", completed_run["path"],
                    "-o", "json")
    assert analyzed.returncode == 0, analyzed.stderr
    estimates = json.loads(analyzed.stdout)["estimates"]
    scale = estimates["scale"]
    assert scale is not None and 0 < scale["factor"] and 1 <= len(scale["runs"]) <= 5, estimates
    assert estimates["seconds"] == round(estimates["unscaledSeconds"] / scale["factor"], 1)
    assert re.fullmatch(r"scaled by [0-9.e+-]+ from the last (run|[2-5] runs) of this shape on cpu", scale["basis"])
    assert "tokens/s per device measured by" in estimates["basis"]  # the catalog's basis, as it was
    text = akka(url, "training", "datasets", "analyze", f"{project}/chat:train", "-f", completed_run["path"]).stdout
    assert f"  {scale['basis']} (the catalog's throughput gives about " in text, text


def test_events_stream_a_json_line_per_status_then_the_run(watched):
    url = watched["url"]
    # long enough for the stream, which reads every half second, to see it train on a fast machine too
    document = plan(watched["name"], watched["dataset"])
    document["config"]["hyperparams"]["training"] = {"maxSteps": 40, "batchSize": 4}
    document["execution"]["saveEvery"] = 40
    longer = write_plan(watched["tmp"], document)
    started = akka(url, "training", "runs", "start", "-f", longer, "--force", "--wait", "--exit-status",
                   "--events", "-o", "json")
    assert started.returncode == 0, started.stdout + started.stderr
    *events, final = [json.loads(line) for line in started.stdout.splitlines()]  # JSON lines, even under -o json
    assert all(e["event"] == "status" and e["item"] == "run" and e["runId"] == final["runId"] for e in events)
    phases = [e["phase"] for e in events]
    order = ["QUEUED", "PREPARING", "TRAINING", "COMPLETED"]
    assert "TRAINING" in phases and phases[-1] == "COMPLETED"
    assert [p for p in order if p in phases] == list(dict.fromkeys(phases))  # a line per change, never back
    assert "event" not in final and final["phase"] == "COMPLETED"
    assert final == json.loads(akka(url, "training", "runs", "get", final["runId"], "-o", "json").stdout)
    training = [e for e in events if e["phase"] == "TRAINING" and e["live"]["unit"] == "steps"]
    assert training and all(e["live"]["total"] == 40 and e["live"]["done"] == e["progress"]["observedStep"]
                            for e in training)
    # every training line under way says where its ETA stands: measured from the steps seen (and on what), or
    # still measuring (fewer than two updates seen: a quick run on a loaded machine may show no more)
    under_way = [e["live"] for e in training if e["live"]["done"] < 8]
    assert all(live["etaStatus"] in ("measured", "measuring") for live in under_way), under_way
    assert all(re.fullmatch(r"from the last \d+ steps", live["etaBasis"]) and live["etaSeconds"] is not None
               for live in under_way if live["etaStatus"] == "measured"), under_way
    assert all(live["etaBasis"] is None for live in under_way if live["etaStatus"] == "measuring"), under_way

    # a later follow of the ended run: its one status, then the run
    again = akka(url, "training", "runs", "wait", final["runId"], "--events", "-o", "json-compact")
    assert again.returncode == 0, again.stderr
    event, run = [json.loads(line) for line in again.stdout.splitlines()]
    assert event["event"] == "status" and event["phase"] == "COMPLETED" and event["live"]["done"] == 40
    assert run == final
    refused = akka(url, "training", "runs", "wait", final["runId"], "--events")  # a stream of JSON needs a JSON mode
    assert refused.returncode == 2 and "--events needs -o json or -o json-compact" in refused.stderr.replace("\n", " ")


def _line_within(process: subprocess.Popen, seconds: float) -> str:
    """The first line the process prints, waiting at most `seconds` (then the test fails with what it said)."""
    found: list[str] = []
    reader = threading.Thread(target=lambda: found.append(process.stdout.readline()), daemon=True)
    reader.start()
    reader.join(seconds)
    if not found or not found[0]:
        process.kill()
        raise AssertionError(f"no line within {seconds:g}s: {process.stderr.read()}")
    return found[0].rstrip("\n")
