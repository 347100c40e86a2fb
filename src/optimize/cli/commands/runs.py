"""`akka training runs start|get|list|annotate|metrics|compare|rollouts|snapshots|wait|logs|tensorboard|pause|resume|
cancel`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from optimize.cli.common import client_for, command, fail
from optimize.cli.dry_run import SOURCES, memory_line, render_dry_run
from optimize.cli.follow import Events, check_events, follow_status
from optimize.cli.logs import add_logs_command
from optimize.cli.output import CommandFailed, Output
from optimize.cli.render import DASH, age, footer, table
from optimize.cli.safe_text import safe_markup
from optimize.cli.tensorboard import add_tensorboard_command

app = typer.Typer(help="Training runs: start, follow and read them.", no_args_is_help=True)
FAILED_PHASES = ("FAILED", "CANCELLED")


@command(app, "start")
def start(
    out: Output,
    plan_file: Annotated[str, typer.Option("-f", "--file", help="Run plan (YAML or JSON); - reads stdin.")],
    wait: Annotated[bool, typer.Option("--wait", help="Follow the run until it ends.")] = False,
    exit_status: Annotated[bool,
                           typer.Option("--exit-status", help="With --wait: exit 1 unless it completes.")] = False,
    events: Events = False,
    force: Annotated[bool, typer.Option("--force", help="Start without asking for confirmation.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Check everything a submission checks; start nothing.")
                       ] = False,
    show_resolved: Annotated[bool, typer.Option("--show-resolved", help="With --dry-run: every resolved setting "
                                                "and where it came from.")] = False,
) -> None:
    """Submit a run plan. The plan is checked first; then it asks before starting unless --force."""
    from optimize.core.ids import new_id
    from optimize.schemas.plans import load_plan_text, parse_plan

    if exit_status and not wait:
        raise typer.BadParameter("--exit-status needs --wait", param_hint="'--exit-status'")
    check_events(out, events, wait)
    if show_resolved and not dry_run:
        raise typer.BadParameter("--show-resolved needs --dry-run", param_hint="'--show-resolved'")
    try:
        text = sys.stdin.read() if plan_file == "-" else Path(plan_file).read_text()
    except OSError as error:
        fail(f"cannot read {plan_file}: {error.strerror}")
    document = load_plan_text(text)
    plan = parse_plan(document)  # refuses an unknown or malformed field by its path, before asking anything
    if dry_run:
        with client_for(out, timeout=120.0) as api:
            answer = api.runs.start(document, dry_run=True)
        out.emit(answer, lambda con, d: render_dry_run(con, d, show_resolved))
        return
    document.setdefault("submissionId", new_id())  # a retried request reaches the same run
    if not force:
        if not sys.stdin.isatty() or plan_file == "-":
            fail("starting a run needs confirmation", "pass --force to start without asking")
        if not typer.confirm(f"Start a {plan.config.method} run of {plan.base_model} on {plan.config.dataset} "
                             f"in project {plan.project}?"):
            raise CommandFailed(1)
    with client_for(out) as api:
        run = api.runs.start(document)
        for warning in run.get("warnings") or []:
            out.note(f"[yellow]warning:[/] {warning}")
        if not wait:
            out.emit(run, lambda con, r: con.print(
                f"Run {r['runId'][:12]} {r['phase'].title()} in project {r['project']}; follow it with: "
                f"akka training runs wait {r['runId'][:12]}"))
            return
        out.note(f"Run {run['runId'][:12]} submitted.")
        _follow(api, out, run["runId"], None, exit_status, events)


@command(app, "get")
def get(out: Output, run: Annotated[str, typer.Argument(help="Run id or unambiguous prefix.")],
        settings: Annotated[bool,
                            typer.Option("--settings", help="Every resolved setting, stated ones marked.")] = False
        ) -> None:
    """Show a run: State, Results, Cost (and --settings)."""
    with client_for(out) as api:
        out.emit(api.runs.get(run, settings=settings), _render_run)


@command(app, "list")
def list_runs(
    out: Output,
    project: Annotated[str | None, typer.Option("--project", help="Only this project's runs.")] = None,
    phase: Annotated[str | None, typer.Option("--phase", help="open (unfinished) or a phase, e.g. COMPLETED.")] = None,
    archived: Annotated[bool, typer.Option("--archived", help="Include runs of archived projects.")] = False,
) -> None:
    """List runs, newest first; runs of archived projects only with --archived or --project."""
    with client_for(out) as api:
        out.emit(api.runs.list(project=project, phase=phase, archived=archived), _render_list)


@command(app, "annotate")
def annotate(
    out: Output,
    run: Annotated[str, typer.Argument(help="Run id or prefix.")],
    description: Annotated[str | None, typer.Option("--description", help="The run's description; an empty TEXT "
                                                    "clears it.")] = None,
    config_name: Annotated[str | None, typer.Option("--config-name", help="The run's column in its project's scores "
                                                    "tables; an empty TEXT clears it (the column is then the model "
                                                    "name and the config hash).")] = None,
) -> None:
    """Set or clear a run's notes: its description and its config name (its column in the scores tables)."""
    if description is None and config_name is None:
        fail("give --description, --config-name or both", "an empty TEXT clears that field, e.g. --description ''",
             code=2)
    with client_for(out) as api:
        answer = api.runs.annotate(run, description=description, config_name=config_name)
    out.emit(answer, lambda con, r: con.print(_annotated_line(r, description, config_name), markup=False))


def _annotated_line(r: dict[str, Any], description: str | None, config_name: str | None) -> str:
    """What `annotate` set, in one line: the fields given, each with its new value or "cleared"."""
    parts = []
    if description is not None:
        parts.append(f"description set to {r['description']!r}" if r.get("description") else "description cleared")
    if config_name is not None:
        parts.append(f"config name set to {r['configName']!r}" if r.get("configName") else "config name cleared")
    return f"Run {r['runId'][:12]}: {'; '.join(parts)}."


@command(app, "metrics")
def metrics(out: Output, run: Annotated[str, typer.Argument(help="Run id or prefix.")],
            limit: Annotated[int | None, typer.Option("--limit", min=1, help="Only the last N steps.")] = None) -> None:
    """Per-step loss, learning rate, grad norm and tokens; validation loss where the run validates; a reinforcement
    run's reward and the seconds each update spent generating its rollouts and updating."""
    with client_for(out) as api:
        out.emit(api.runs.metrics(run, limit=limit), _render_metrics)


@command(app, "compare")
def compare(
    out: Output,
    run: Annotated[str, typer.Argument(help="Run id or prefix (RUN).")],
    baseline: Annotated[str, typer.Argument(help="The run to compare against (BASELINE): id or prefix.")],
    window: Annotated[int, typer.Option("--window", min=1, max=1000, help="Updates per window.")] = 10,
    spike_factor: Annotated[float, typer.Option("--spike-factor", min=1.0, max=100.0, help="Flag an update whose "
                                                "gradient norm is at least F × its run's median (above 1).")] = 3.0,
    margin: Annotated[float, typer.Option("--margin", min=0.0, max=100.0, help="The absolute loss difference a "
                                          "window must pass to count as different.")] = 0.05,
    across_plans: Annotated[bool, typer.Option("--across-plans", help="Compare runs whose plans differ in more than "
                                               "hyperparams and execution.")] = False,
    align: Annotated[str, typer.Option("--align", help="step: windows of updates; tokens: windows by tokens "
                                       "seen.")] = "step",
) -> None:
    """Two sft runs' training losses, window by window: both means and the difference (RUN − BASELINE), gradient
    spikes, the first window beyond the margin and a verdict (better, worse or same)."""
    if align not in ("step", "tokens"):
        raise typer.BadParameter("use step or tokens", param_hint="'--align'")
    with client_for(out) as api:
        out.emit(api.runs.compare(run, baseline=baseline, window=window, spike_factor=spike_factor, margin=margin,
                                  across_plans=across_plans, align=align), _render_comparison)


@command(app, "hparams")
def hparams(out: Output, run: Annotated[str, typer.Argument(help="Run id or prefix.")],
            against: Annotated[str | None, typer.Option("--against", help="Another run: show only the "
                                                        "hyperparameters whose values differ.")] = None) -> None:
    """The run's hyperparameters flattened by path (every leaf of its resolved config but the datasets) and their
    sha256; with --against, the paths where the two runs differ."""
    with client_for(out) as api:
        out.emit(api.runs.hparams(run, against=against), _render_hparams)


def _render_hparams(con, data) -> None:
    if data.get("against") is None:
        con.print(f"Run {data['runId'][:12]}  sha {data['sha'][:16]}")
        grid = table("PATH", "VALUE")
        for path, value in data["hyperparams"].items():
            grid.add_row(path, json.dumps(value))
        con.print(grid)
        return
    con.print(f"Run {data['runId'][:12]} (sha {data['sha'][:16]}) against {data['against'][:12]} "
              f"(sha {data['againstSha'][:16]}): {len(data['differences'])} difference(s)")
    if data["differences"]:
        grid = table("PATH", data["runId"][:12], data["against"][:12])
        for d in data["differences"]:
            grid.add_row(d["path"], json.dumps(d["value"]), json.dumps(d["against"]))
        con.print(grid)


@command(app, "rollouts")
def rollouts(out: Output, run: Annotated[str, typer.Argument(help="Run id or prefix.")],
             step: Annotated[int | None, typer.Option("--step", min=0, help="The update to show (default: the newest "
                                                                          "recorded).")] = None) -> None:
    """A grpo or gspo run's sampled rollouts at one update: each prompt with its completions, every reward term's
    score and the weighted total."""
    with client_for(out) as api:
        out.emit(api.runs.rollouts(run, step=step), _render_rollouts)


@command(app, "snapshots")
def snapshots(out: Output, run: Annotated[str, typer.Argument(help="Run id or prefix.")]) -> None:
    """The run's committed snapshots (saves whose upload completed)."""
    with client_for(out) as api:
        out.emit(api.runs.snapshots(run), _render_snapshots)


@command(app, "wait")
def wait(
    out: Output,
    run: Annotated[str, typer.Argument(help="Run id or prefix.")],
    exit_status: Annotated[bool, typer.Option("--exit-status", help="Exit 1 unless the run completes.")] = False,
    timeout: Annotated[float | None,
                       typer.Option("--timeout", help="Give up following after this many seconds.")] = None,
    events: Events = False,
) -> None:
    """Follow a run until it ends: a line per change, then the run (-o json: the run alone; --events: a JSON line
    per status first)."""
    check_events(out, events)
    with client_for(out) as api:
        _follow(api, out, run, timeout, exit_status, events)


add_logs_command(app, "runs", "run", status="akka training runs get")  # logs RUN [--attempt N] [--follow]
add_tensorboard_command(app)  # tensorboard RUN [--dir DIR] [--port 6006] [--sync-only]


@command(app, "pause")
def pause(
    out: Output,
    run: Annotated[str, typer.Argument(help="Run id or prefix.")],
    checkpoint: Annotated[str, typer.Option("--checkpoint", help="latest: stop against the newest save with its "
                                            "training state; save: save at the next update, then stop.")],
) -> None:
    """Pause a run: it stops and releases its devices; resume it later as a new attempt."""
    if checkpoint not in ("latest", "save"):
        raise typer.BadParameter("use latest or save", param_hint="'--checkpoint'")
    with client_for(out) as api:
        answer, status = api.runs.pause(run, checkpoint=checkpoint)
    short = answer["runId"][:12]
    if status == 200:
        message = (f"Run {short} is already pausing (--checkpoint {checkpoint}); "
                   f"follow it with: akka training runs wait {short}")
    elif checkpoint == "save":
        message = (f"Run {short} pausing: it saves at its next update, waits for the save to be committed, then stops "
                   f"and releases its devices; follow it with: akka training runs wait {short}")
    else:
        message = (f"Run {short} pausing: it stops at its next update against its newest save with training state; "
                   f"follow it with: akka training runs wait {short}")
    out.emit({**answer, "alreadyPausing": status == 200}, lambda con, _: con.print(message))


@command(app, "resume")
def resume(out: Output, run: Annotated[str, typer.Argument(help="Run id or prefix.")]) -> None:
    """Resume a paused run as a new attempt, from its newest save that holds training state."""
    with client_for(out) as api:
        answer = api.runs.resume(run)
    short = answer["runId"][:12]
    out.emit(answer, lambda con, r: con.print(f"Run {short} queued as attempt {r['resumed']['attempt']}; it "
                                              f"{_restored(r['resumed'])}; "
                                              f"follow it with: akka training runs wait {short}"))


@command(app, "cancel")
def cancel(
    out: Output,
    run: Annotated[str, typer.Argument(help="Run id or prefix.")],
    force: Annotated[bool, typer.Option("--force", help="Cancel without asking for confirmation.")] = False,
) -> None:
    """Cancel a run in any unfinished phase; its worker stops and its devices are released."""
    if not force:
        if not sys.stdin.isatty():
            fail("cancelling a run needs confirmation", "pass --force to cancel without asking")
        if not typer.confirm(f"Cancel run {run}? Its saves stay; it cannot be resumed."):
            raise CommandFailed(1)
    with client_for(out) as api:
        answer, status = api.runs.cancel(run)
    short = answer["runId"][:12]
    out.emit(answer, lambda con, _: con.print(
        f"Run {short} was already cancelled." if status == 200
        else f"Run {short} cancelled; its devices are released."))


def _restored(resumed: dict[str, Any]) -> str:
    if not resumed.get("snapshotId"):
        return "restored none; starts from the base model"
    return f"restored snapshot {resumed['snapshotId'][:12]} at step {resumed['step']} with its optimizer state"


def _follow(api, out: Output, run_id: str, timeout: float | None, exit_status: bool, events: bool = False) -> None:
    final = follow_status(api, out, "runs", run_id, timeout, _status_line, _render_run, events=events)
    if exit_status and final["phase"] != "COMPLETED":
        raise CommandFailed(1)


def _status_line(r: dict[str, Any]) -> str:
    """The headline of a followed run; its step, loss, tokens/s and ETA come from cli.progress."""
    parts = [f"{r['runId'][:12]} {r['phase'].title()}"]
    if r["phase"] in ("PAUSING", "PAUSED") and r.get("pause"):
        parts.append(_pause_text(r["pause"]))
    if r.get("waitingFor"):
        parts.append(f"— {r['waitingFor']}")
    if r.get("failureReason"):
        parts.append(f"— {r['failureReason'].splitlines()[0]}")
    guards = r.get("guards") or {}
    if guards.get("stop") and not r.get("terminal"):
        parts.append(f"— stopping: {guards['stop']['message']}")
    parts.extend(f"— warning: {w['message']}" for w in guards.get("warnings") or [])
    return "  ".join(parts)


def _stop_line(r: dict[str, Any]) -> str:
    """Why the run's guards stopped it (execution.stopWhen), and where it ended."""
    stop = r["guards"]["stop"]
    line = f"{stop['message']} (met at step {stop['step']})"
    if r["phase"] == "COMPLETED":
        steps = (r.get("results") or {}).get("steps") or (r.get("progress") or {}).get("observedStep")
        return f"{line}; it completed at step {steps} with the adapter trained to there"
    return line if r.get("terminal") else f"{line}; it saves at its next update and completes there"


def _pause_text(pause: dict[str, Any]) -> str:
    asked = (f"execution.pauseAtStep {pause.get('requestedAtStep')}" if pause.get("askedBy") == "plan"
             else f"--checkpoint {pause['checkpoint']}")
    if pause["state"] == "pausing":
        return f"pausing ({asked}), asked at step {pause.get('requestedAtStep') or 0}"
    against = (f"against snapshot {pause['snapshotId'][:12]} at step {pause['savedStep']}" if pause.get("snapshotId")
               else "with no save holding training state")
    stopped = f" after step {pause['stoppedAtStep']}" if pause.get("stoppedAtStep") is not None else ""
    text = f"paused{stopped} ({asked}) {against}; devices released"
    if pause.get("saveFailed"):
        text += f"; the save failed: {pause['saveFailed']}"
    if pause.get("endReason"):
        text += f"; {pause['endReason']}"
    return text


def _seconds(value: float | None) -> str:
    if value is None:
        return DASH
    value = float(value)
    if value < 60:
        return f"{value:.0f}s"
    minutes, seconds = divmod(int(value), 60)
    return f"{minutes}m{seconds:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


PREPARING_PARTS = {"workerStart": "worker start", "imports": "imports", "downloads": "downloads", "rows": "rows",
                   "smoke": "smoke check", "modelLoad": "model load", "trainer": "trainer", "startCheck": "start check"}


def _preparing_line(parts: dict[str, Any]) -> str:
    """PREPARING's parts as the worker measured them; the model's load went on beside the rows."""
    line = ", ".join(f"{label} {parts[key]:.1f}s" for key, label in PREPARING_PARTS.items()
                     if parts.get(key) is not None)
    if parts.get("modelLoadAhead") is not None:
        line += f" (the model's load took {parts['modelLoadAhead']:.1f}s beside the rows)"
    return line


def _prediction_line(prediction: dict[str, Any] | None, ended: bool) -> str:
    """The pre-flight estimate of the training time against the time measured (so far, while it runs)."""
    if not prediction:
        return f"{DASH} (recorded before its devices are claimed)"
    if prediction.get("seconds") is None:
        return f"no estimate: {prediction['basis']}"
    text = f"training {_seconds(prediction['seconds'])} for {prediction['steps']} steps ({prediction['basis']})"
    if prediction.get("scale"):  # this deployment's runs of the same shape measured against their estimates
        text = (f"{text[:-1]}; {prediction['scale']['basis']}, {_seconds(prediction['unscaledSeconds'])} "
                "unscaled)")
    actual = prediction.get("actualSeconds")
    if actual is None:
        return text
    text += f"; actual {_seconds(actual)}{'' if ended else ' so far'}"
    if ended and prediction["seconds"] > 0:
        text += f" ({actual / prediction['seconds']:.2f}× the estimate)"
    return text


def _checks_line(checks: dict[str, Any] | None) -> str:
    if not checks:
        return DASH
    if not checks["total"]:
        return "none before the first update (the reference check compares supervised batches)"
    mark = {"passed": "✓ passed", "warning": "✓ passed", "failed": "✗ failed"}[checks["status"]]
    line = f"{mark} {checks['passed']} of {checks['total']} in {_seconds(checks['seconds'])}"
    for check in checks["checks"]:
        line += (f"; {check['name']}: mean {check['meanLogprobError']:.3g} "
                 f"(bound {check['bounds']['meanLogprobError']:.3g}),"
                 f" max {check['maxLogprobError']:.3g}, fp32 max {check['fp32MaxLogprobError']:.3g},"
                 f" roundingError {check['roundingError']:.3g}")
    return line


def _length_line(check: dict[str, Any] | None) -> str:
    if not check:
        return DASH
    words = {"passed": "passed", "waiting": "waiting for the datasets' analyses", "notRun": "not run",
             "refused": "refused the run"}
    parts = []
    for d in check["datasets"]:
        source = (f"analysis {d['analysisId'][:12]}" if d.get("analysisId") else "the version's longest row"
                  if d.get("status") == "prepared" else "no analysis")
        detail = f", {d['reason']}" if d.get("reason") else ""
        parts.append(f"{d['dataset']} ({d['role']}) against {source}{detail}")
    if not parts:  # a reinforcement run: each prompt's budget is checked as the worker renders it
        return f"{words[check['status']]} (a reinforcement run checks each prompt against its budget as it renders it)"
    return f"{words[check['status']]}: " + "; ".join(parts)


def _render_run(con, r) -> None:
    p = r.get("progress") or {}
    res = r.get("results") or {}
    cost = r.get("cost") or {}
    con.print("[bold]State[/]")
    con.print(f"  Run          {r['runId']}")
    con.print(f"  Project      {r['project']}")
    con.print(f"  Method       {r['method']}")
    con.print(f"  Base model   {r['baseModel']['id']} at {r['baseModel']['commit'][:12]}")
    con.print(f"  Dataset      {r['dataset']['reference']} — {r['dataset']['rows']} example(s)")
    if r.get("validation"):
        con.print(f"  Validation   {r['validation']['reference']}")
    if r.get("configName"):
        con.print(f"  Config name  {r['configName']}", markup=False)
    if r.get("description"):
        con.print(f"  Description  {r['description']}", markup=False)
    most = (r.get("execution") or {}).get("maxAttempts") if not r.get("terminal") else None
    con.print(f"  Phase        {r['phase'].title()} (attempt {r['attempt']}"
              f"{f'; up to {most} if its worker is lost' if most else ''})")
    if r.get("waitingFor"):
        con.print(f"  Waiting      {r['waitingFor']}")
    if r["phase"] == "PREPARING" and p.get("rowsTotal"):
        con.print(f"  Progress     rows {p.get('rowsDone', 0)} of {p['rowsTotal']}")
    elif p.get("totalSteps"):
        share = 100 * p.get("observedStep", 0) / p["totalSteps"]
        loss = f", loss {p['loss']:.4f}" if p.get("loss") is not None else ""
        con.print(f"  Progress     {p.get('observedStep', 0)}/{p['totalSteps']} steps ({share:.0f}%){loss}")
    uploads = [f"{p[key]} {word}" for key, word in (("savesWaiting", "waiting to upload"), ("savesSkipped", "skipped"))
               if p.get(key)]
    saved = f"step {p['savedStep']}" if p.get("savedStep") else DASH
    con.print(f"  Saved        {saved}{' (' + ', '.join(uploads) + ')' if uploads else ''}")
    if r["phase"] in ("PAUSING", "PAUSED") and r.get("pause"):
        con.print(f"  Pause        {_pause_text(r['pause'])}")
    if r.get("resumed"):
        lost = f" after {r['resumed']['afterLoss']}" if r["resumed"].get("afterLoss") else ""
        con.print(f"  Resumed      attempt {r['resumed']['attempt']} {_restored(r['resumed'])}{lost}")
    if r.get("branch") and r["branch"].get("source"):  # source.model: a registered adapter's weights
        con.print(f"  Source       {r['branch']['why']}")
    elif r.get("branch"):
        b = r["branch"]
        con.print(f"  Restore      {b['restore']} from snapshot {b['snapshotId'][:12]} at step {b['step']} of run "
                  f"{b['parentRunId'][:12]} ({b['why']})")
    if r.get("warnings"):
        for warning in r["warnings"]:
            con.print(f"  Warning      {warning}")
    if (r.get("guards") or {}).get("stop"):
        con.print(f"  Stopped      {_stop_line(r)}")
    if r.get("failureReason"):
        con.print(f"  [red]Failure[/]      {r['failureReason'].splitlines()[0]}")
    con.print("[bold]Results[/]")
    con.print(f"  Model        {res.get('model') or DASH}")
    if res.get("validationLoss") is not None:
        import math

        perplexity = math.exp(min(res["validationLoss"], 50))
        con.print(f"  Validation   loss {res['validationLoss']:.4f} (perplexity {perplexity:.2f})")
    loss = res.get("trainingLoss")
    con.print(f"  Training     loss {loss['start']:.4f} → {loss['end']:.4f} (mean {loss['mean']:.4f})" if loss
              else f"  Training     loss {DASH}")
    if res.get("preference"):
        p = res["preference"]
        value = "—" if p.get("accuracy") is None else f"{p['accuracy']:.3f}"
        margin = "—" if p.get("rewardMargin") is None else f"{p['rewardMargin']:.4f}"
        engine = "Liger's fused loss" if p["loss"] == "liger-fused" else "TRL's loss"
        con.print(f"  Preference   accuracy {value}, reward margin {margin}; {p['lossType']} loss (beta "
                  f"{p['beta']:g}) computed with {engine}")
    if res.get("rollouts"):
        con.print(f"  Rollouts     {_rollouts_line(res['rollouts'])}")
    if res.get("smoke"):
        con.print(f"  Smoke check  {_smoke_line(res['smoke'])}")
    fit = res.get("dataFit") or {}
    fitted = []
    if fit.get("tooLong"):
        fitted.append(f"{fit['tooLong']} row(s) longer than maxSeqLength left out (tooLong)")
    if fit.get("trimmed"):
        fitted.append(f"{fit['trimmed']} row(s) trimmed, {fit['turnsRemoved']} oldest turn(s) removed")
    if fit.get("cut"):
        fitted.append(f"{fit['cut']} row(s) cut at maxSeqLength past their mask")
    if fitted:
        con.print(f"  Data fit     {'; '.join(fitted)}")
    if packed := fit.get("packing"):
        con.print(f"  Packing      {packed['rows']:,} rows in {packed['bins']:,} bins of "
                  f"{packed['binTokens']:,} tokens, {packed['efficiency']:.1%} of their tokens the rows' own")
    con.print(f"  Length check {_length_line(r.get('lengthCheck'))}")
    con.print(f"  Start checks {_checks_line(r.get('checks'))}")
    con.print("[bold]Cost[/]")
    devices = r["execution"]["devices"]
    estimate = " (estimate)" if cost.get("estimate") else ""
    con.print(f"  Devices      {_seconds(cost.get('deviceSeconds'))}{estimate} on {devices} "
              f"{r['execution']['deviceProfile']} "
              f"device{'s' if devices != 1 else ''}"
              + (f" ({r['execution']['sharding']})" if r["execution"].get("sharding") else ""))
    d = cost.get("duration") or {}
    ended = f", ended {age(r['timing']['finishedAt'])}" if r["timing"].get("finishedAt") else ""
    con.print(f"  Duration     waiting for devices {_seconds(d.get('waitingForDevices'))}, preparing "
              f"{_seconds(d.get('preparing'))}, training {_seconds(d.get('training'))}{ended}")
    if r["timing"].get("preparing"):
        con.print(f"  Preparing    {_preparing_line(r['timing']['preparing'])}")
    con.print(f"  Predicted    {_prediction_line(r.get('prediction'), r.get('terminal', False))}")
    if cost.get("tokensPerSecondPerDevice"):
        mfu = cost.get("mfu")
        shown = f"; MFU {mfu['value']:.1%} ({mfu['basis']} over {mfu['device']}'s {mfu['peakTflops']:g} TFLOP/s bf16)" \
            if mfu else ""
        con.print(f"  Throughput   {cost['tokensPerSecondPerDevice']:.0f} tokens/s per device{shown}")
    if shared := cost.get("sharedBase"):
        rate = shared.get("deviceTokensPerSecond")
        con.print(f"  Shared base  with runs {', '.join(run[:12] for run in shared['runs']) or DASH}: "
                  f"{f'{rate:.0f}' if rate is not None else DASH} tokens/s on the device in all")
    peak = cost.get("peakDeviceMemoryGiB")
    con.print(f"  Training peak {f'{peak:.2f} GiB per device' if peak is not None else DASH + ' (no GPU)'}")
    if r.get("memory"):
        con.print(f"  Memory       {memory_line(r['memory'])}", markup=False)
    if cost.get("hostMemoryGiB") is not None:
        con.print(f"  Host memory  {cost['hostMemoryGiB']:.2f} GiB")
    if r.get("settings"):
        rollout = {path.rsplit(".", 1)[-1]: item["value"] for path, item in r["settings"].items()
                   if path.startswith("config.rlHyperparams.") and path.count(".") == 2}
        if rollout:  # a reinforcement run: how it samples, each value as resolved
            con.print(f"  Rollouts     klBeta {rollout['klBeta']:g}, temperature {rollout['temperature']:g}, "
                      f"{rollout['generations']} generations per prompt, completions up to "
                      f"{rollout['maxCompletionLength']} tokens, {rollout['importanceSampling']}-level importance "
                      "sampling")
        con.print("[bold]Settings[/]")
        for path, item in r["settings"].items():
            mark = "" if item["source"] == "default" else f" ({SOURCES.get(item['source'], item['source'])})"
            con.print(f"  {path} = {item['value']!r}{mark}")


def _smoke_line(smoke: dict) -> str:
    left = f", {smoke['leftOut']} answer(s) calling tools left out" if smoke.get("leftOut") else ""
    mean = "no answer scored" if smoke.get("meanScore") is None else \
        f"mean score {smoke['meanScore']:.3f} over {smoke['scored']} answer(s)"
    floor = f" (minScore {smoke['minScore']:g})" if smoke.get("minScore") is not None else ""
    verdict = "passed" if smoke["status"] == "passed" else f"[red]failed[/]: {smoke['reason']}"
    return f"{verdict} — {smoke['rows']} row(s), {smoke['steps']} update(s); {mean}{floor}{left}"


def _rollouts_line(rollouts: dict) -> str:
    terms = ", ".join(f"{name} {_num(value, '{:.3f}')}" for name, value in (rollouts.get("terms") or {}).items())
    zero = rollouts.get("zeroVarianceShare")
    return (f"reward {_num(rollouts.get('reward'), '{:.3f}')} (± {_num(rollouts.get('rewardStd'), '{:.3f}')}; "
            f"{terms}), KL {_num(rollouts.get('kl'))}, groups without variance "
            f"{DASH if zero is None else f'{100 * zero:.0f}%'}, completions "
            f"{_num(rollouts.get('completionLength'), '{:.1f}')} tokens (klBeta {rollouts['klBeta']:g}, temperature "
            f"{rollouts['temperature']:g}, {rollouts['generations']} per prompt)")


def _render_rollouts(con, data) -> None:
    from optimize.cli.safe_text import safe_markup

    run = data["runId"][:12]
    if data["step"] is None:
        con.print(f"Run {run} ({data['method']}) has recorded no rollouts yet: a sample of each update's rollouts is "
                  "recorded as it trains.")
        return
    items = data["items"]
    groups: list[list[dict]] = []
    for item in items:
        if not groups or item.get("group") != groups[-1][0].get("group") or item.get("group") is None:
            groups.append([item])
        else:
            groups[-1].append(item)
    terms = ", ".join(f"{t['name']} ×{t['weight']:g}" for t in data["terms"])
    con.print(f"Run {run} ({data['method']}), step {data['step']}: {len(items)} completion(s) of {len(groups)} "
              f"prompt(s); total = {safe_markup(terms)}")
    names = [t["name"] for t in data["terms"]]
    for number, group in enumerate(groups, 1):
        lines = group[0]["prompt"].splitlines() or [""]
        more = " …" if len(lines) > 1 or "prompt" in (group[0].get("cut") or []) else ""
        con.print(f"\n[bold]Prompt {number}[/]  {safe_markup(lines[0])}{more}")
        for index, item in enumerate(group, 1):
            named = names + [name for name in item["scores"] if name not in names]
            scores = "  ".join(f"{safe_markup(name)} {_num(item['scores'].get(name), '{:.3f}')}" for name in named)
            con.print(f"  {index:>2}  {scores}  [bold]total {_num(item.get('total'), '{:.3f}')}[/]")
            text = item["completion"] if item["completion"].strip() else "(empty)"
            for line in text.splitlines():
                con.print(f"      {safe_markup(line)}")
            if "completion" in (item.get("cut") or []):
                con.print("      [dim](cut to 2000 characters)[/]")
            for name, error in (item.get("errors") or {}).items():
                con.print(f"      [red]{safe_markup(name)} failed:[/] {safe_markup(error)}")
    con.print(f"\nStep {data['step']} of steps recorded {_step_ranges(data['steps'])}; another with --step N.")


def _step_ranges(steps: list[int]) -> str:
    runs: list[list[int]] = []
    for step in steps:
        if runs and step == runs[-1][1] + 1:
            runs[-1][1] = step
        else:
            runs.append([step, step])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _render_list(con, data) -> None:
    grid = table("RUN", "PROJECT", "METHOD", "BASE MODEL", "PHASE", "PROGRESS", "MODEL", "CREATED", "NOTES")
    for r in data["runs"]:
        p = r.get("progress") or {}
        progress = f"{p.get('observedStep', 0)}/{p['totalSteps']}" if p.get("totalSteps") else DASH
        project = r["project"] + (" (archived)" if r.get("projectArchived") else "")
        grid.add_row(r["runId"][:12], project, r["method"], r["baseModel"]["id"], r["phase"].title(), progress,
                     r["results"].get("model") or DASH, age(r["timing"]["createdAt"]), _notes(r))
    con.print(grid)
    con.print(footer(len(data["runs"]), "run"))


def _notes(r: dict[str, Any], most: int = 40) -> str:
    """A run's pipeline stage, config name and description in one cell of `runs list`, cut to `most` characters."""
    stage = f"pipeline {r['pipeline']['pipelineId'][:12]} stage {r['pipeline']['stage']}" if r.get("pipeline") else None
    notes = ": ".join(note for note in (stage, r.get("configName"), r.get("description")) if note)
    notes = " ".join(notes.split())  # one line
    return safe_markup(notes[:most - 1] + "…" if len(notes) > most else notes) or DASH


def _render_metrics(con, data) -> None:
    preference = any("preferenceAccuracy" in m for m in data["steps"])  # a dpo run's accuracy and margin
    rollouts = any("reward" in m for m in data["steps"])  # a reinforcement run's reward, spread, KL
    extra = ("ACCURACY", "MARGIN") if preference else \
        ("REWARD", "REWARD STD", "KL", "NO VARIANCE", "GENERATION S", "UPDATE S") if rollouts else ()
    grid = table("STEP", "LOSS", *extra, "LEARNING RATE", "GRAD NORM", "TOKENS", "VALIDATION LOSS")
    validation = {m["step"]: m.get("validationLoss") for m in data["validation"]}
    for m in data["steps"]:
        v = validation.get(m["step"])
        values = (_num(m.get("preferenceAccuracy"), "{:.3f}"), _num(m.get("rewardMargin"))) if preference else \
            (_num(m.get("reward"), "{:.3f}"), _num(m.get("rewardStd"), "{:.3f}"), _num(m.get("kl")),
             _num(m.get("zeroVarianceShare"), "{:.2f}"), _num(m.get("generationSeconds"), "{:.2f}"),
             _num(m.get("updateSeconds"), "{:.2f}")) if rollouts else ()
        grid.add_row(str(m["step"]), _num(m.get("loss")), *values, _num(m.get("learningRate"), "{:.3g}"),
                     _num(m.get("gradNorm")), str(m.get("tokens", DASH)), _num(v))
    con.print(grid)
    con.print(footer(len(data["steps"]), "step"))


def _render_comparison(con, data) -> None:
    for role in ("run", "baseline"):
        side = data[role]
        norm = _num(side.get("medianGradNorm"))
        tokens = f", {side['tokens']} tokens" if side.get("tokens") is not None else ""
        con.print(f"{role.title():<9} {side['runId'][:12]}  {side['phase']:<10} project {side['project']}, "
                  f"{side['updates']} update{'s' if side['updates'] != 1 else ''} to step {side['lastStep']}{tokens}, "
                  f"median grad norm {norm}")
    if data["planDifferences"]:
        con.print(f"Across plans: {'; '.join(data['planDifferences'])}")
    tokens = data["align"] == "tokens"
    grid = table("WINDOW", "STEPS", *(("TOKENS",) if tokens else ()), "RUN LOSS", "BASELINE LOSS", "DIFF")
    for w in data["windows"]:
        steps = _steps(w["runSteps"])
        if w["baselineSteps"] != w["runSteps"]:
            steps += f" / {_steps(w['baselineSteps'])}"
        span = (f"{w['tokens'][0]}-{w['tokens'][1]}",) if tokens else ()
        grid.add_row(str(w["window"]), steps, *span, _num(w["runLoss"]), _num(w["baselineLoss"]),
                     f"{w['difference']:+.4f}")
    updates = f"{data['window']} update{'s' if data['window'] != 1 else ''}"
    con.print(f"Windows of {updates} of the baseline, by tokens seen (STEPS: the run's / the baseline's where they "
              "differ):" if tokens else f"Windows of {updates}, over the updates both runs reached:")
    con.print(grid)
    if data["spikes"]:
        con.print(f"Gradient spikes (at least {data['spikeFactor']:g}× the run's median):")
        for s in data["spikes"]:
            con.print(f"  {s['run']} {s['runId'][:12]} step {s['step']}: grad norm {s['gradNorm']:.4f}, "
                      f"median {s['median']:.4f} ({s['ratio']:.1f}×)")
    else:
        con.print(f"Gradient spikes (at least {data['spikeFactor']:g}× the run's median): none")
    beyond = data["firstBeyondMargin"]
    con.print(f"First window beyond ±{data['margin']:g}: " + (
        f"window {beyond['window']} (steps {_steps(beyond['runSteps'])}), {beyond['difference']:+.4f} "
        f"({beyond['direction']})" if beyond else "none"))
    con.print(f"Verdict: {data['verdict']} (run {data['run']['runId'][:12]} against baseline "
              f"{data['baseline']['runId'][:12]}: mean difference {data['meanDifference']:+.4f} over "
              f"{data['windowsCompared']} window{'s' if data['windowsCompared'] != 1 else ''})")


def _steps(span: list[int]) -> str:
    return str(span[0]) if span[0] == span[1] else f"{span[0]}-{span[1]}"


def _num(value, fmt: str = "{:.4f}") -> str:
    return DASH if value is None else fmt.format(value)


def _render_snapshots(con, data) -> None:
    grid = table("SNAPSHOT", "STEP", "ATTEMPT", "KINDS", "HELD BY", "SWEPT", "COMMITTED")
    for s in data["snapshots"]:
        grid.add_row(s["snapshotId"][:12], str(s["step"]), str(s["attempt"]), ", ".join(s["kinds"]) or DASH,
                     "; ".join(s["heldBy"]) or DASH, ", ".join(s["swept"]) or DASH, age(s["committedAt"]))
    con.print(grid)
    count = len(data["snapshots"])
    con.print(f"1 to {count} of {count} snapshots." if count else "No snapshots committed yet.")
