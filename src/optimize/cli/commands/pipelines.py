"""`akka training pipelines start|get|list|wait|resume|cancel`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from optimize.cli.common import client_for, command, fail
from optimize.cli.follow import Events, check_events, follow_status
from optimize.cli.output import CommandFailed, Output
from optimize.cli.render import DASH, age, footer, table

app = typer.Typer(help="Pipelines: train, evaluate and distill stages in one plan, each naming earlier outputs as "
                       "@STAGE.", no_args_is_help=True)
Pipeline = Annotated[str, typer.Argument(help="Pipeline id or unambiguous prefix.")]


@command(app, "start")
def start(
    out: Output,
    plan_file: Annotated[str, typer.Option("-f", "--file", help="Pipeline plan (YAML or JSON); - reads stdin.")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Check every stage that can be checked now; start "
                                          "nothing.")] = False,
    show_resolved: Annotated[bool, typer.Option("--show-resolved", help="With --dry-run: each checked train "
                                                "stage's resolved settings.")] = False,
    wait: Annotated[bool, typer.Option("--wait", help="Follow the pipeline until it ends.")] = False,
    exit_status: Annotated[bool, typer.Option("--exit-status", help="With --wait: exit 1 unless it completes.")
                           ] = False,
    events: Events = False,
) -> None:
    """Start a pipeline: its stages run one after another, each as a run, an evaluation or a distillation."""
    from optimize.core.ids import new_id
    from optimize.schemas.plans import load_plan_text

    if exit_status and not wait:
        raise typer.BadParameter("--exit-status needs --wait", param_hint="'--exit-status'")
    if show_resolved and not dry_run:
        raise typer.BadParameter("--show-resolved needs --dry-run", param_hint="'--show-resolved'")
    check_events(out, events, wait)
    try:
        text = sys.stdin.read() if plan_file == "-" else Path(plan_file).read_text()
    except OSError as error:
        fail(f"cannot read {plan_file}: {error.strerror}")
    document = load_plan_text(text)
    if not isinstance(document, dict):
        fail("a pipeline plan must be one object: kind: pipeline, project, stages")
    with client_for(out, timeout=300.0) as api:
        if dry_run:
            out.emit(api.pipelines.start(document, dry_run=True, show_resolved=show_resolved),
                     lambda con, d: _render_dry_run(con, d, show_resolved))
            return
        document.setdefault("submissionId", new_id())  # a retried request reaches the same pipeline
        answer = api.pipelines.start(document)
        if not wait:
            out.emit(answer, lambda con, p: con.print(
                f"Pipeline {p['pipelineId'][:12]} of {len(p['stages'])} stage(s) {p['phase'].title()}; follow it "
                f"with: akka training pipelines wait {p['pipelineId'][:12]}"))
            return
        out.note(f"Pipeline {answer['pipelineId'][:12]} submitted.")
        _follow(api, out, answer["pipelineId"], None, exit_status, events)


@command(app, "get")
def get(out: Output, pipeline: Pipeline) -> None:
    """Show a pipeline: each stage's state, job, output, score and device time, and the total."""
    with client_for(out) as api:
        out.emit(api.pipelines.get(pipeline), _render)


@command(app, "list")
def list_pipelines(
    out: Output,
    project: Annotated[str | None, typer.Option("--project", help="Only this project's.")] = None,
    phase: Annotated[str | None, typer.Option("--phase", help="open or a phase, e.g. COMPLETED.")] = None,
) -> None:
    """List pipelines, newest first."""
    with client_for(out) as api:
        out.emit(api.pipelines.list(project=project, phase=phase), _render_list)


@command(app, "wait")
def wait(out: Output, pipeline: Pipeline,
         exit_status: Annotated[bool, typer.Option("--exit-status", help="Exit 1 unless it completes.")] = False,
         timeout: Annotated[float | None, typer.Option("--timeout", help="Give up after this many seconds.")] = None,
         events: Events = False) -> None:
    """Follow a pipeline until it ends: a line per change, then the pipeline."""
    check_events(out, events)
    with client_for(out) as api:
        _follow(api, out, pipeline, timeout, exit_status, events)


@command(app, "resume")
def resume(out: Output, pipeline: Pipeline) -> None:
    """Start a failed pipeline's failed stage again, as a new job, and go on; completed stages are kept."""
    with client_for(out) as api:
        answer = api.pipelines.resume(pipeline)
    out.emit(answer, lambda con, p: con.print(f"Pipeline {p['pipelineId'][:12]} {p['phase'].title()} again."))


@command(app, "cancel")
def cancel(out: Output, pipeline: Pipeline) -> None:
    """Cancel a pipeline and the job of the stage running now."""
    with client_for(out) as api:
        answer = api.pipelines.cancel(pipeline)
    out.emit(answer, lambda con, p: con.print(f"Pipeline {p['pipelineId'][:12]} {p['phase'].title()}."))


def _follow(api, out: Output, pipeline_id: str, timeout: float | None, exit_status: bool, events: bool) -> None:
    final = follow_status(api, out, "pipelines", pipeline_id, timeout, _line, _render, events=events)
    if exit_status and final["phase"] != "COMPLETED":
        raise CommandFailed(1)


def _line(p: dict[str, Any]) -> str:
    """The headline of a followed pipeline: its phase and the stage under way."""
    parts = [f"{p['pipelineId'][:12]} {p['phase'].title()}"]
    current = next((s for s in p["stages"] if s["state"] in ("running", "waiting")), None)
    if current and p["phase"] == "RUNNING":
        job = (f" ({current['jobKind']} {current['jobId'][:12]} {current['jobPhase'].title()})"
               if current["jobId"] else "")
        parts.append(f"stage {current['name']} {current['state']}{job}")
    if p.get("failureReason"):
        parts.append(f"— {p['failureReason'].splitlines()[0]}")
    return "  ".join(parts)


def _render(con, p: dict[str, Any]) -> None:
    con.print(f"[bold]Pipeline[/]  {p['pipelineId']}")
    con.print(f"Project   {p['project']}")
    con.print(f"Phase     {p['phase'].title()}" + (f", {p['count']['done']} of {p['count']['total']} stages "
                                                     "completed" if p.get("count") else ""))
    if p.get("failureReason"):
        con.print(f"[red]Failure[/]   {p['failureReason'].splitlines()[0]}")
    grid = table("STAGE", "TYPE", "STATE", "JOB", "OUTPUT", "SCORE", "DEVICE TIME")
    for s in p["stages"]:
        job = f"{s['jobKind']} {s['jobId'][:12]}" if s["jobId"] else DASH
        score = DASH if s["meanScore"] is None else f"{s['meanScore']:.3f}"
        if s["minMeanScore"] is not None:
            score += f" (gate {s['minMeanScore']:g})"
        grid.add_row(s["name"], s["type"], s["state"], job, s["output"] or DASH, score,
                     DASH if s["deviceSeconds"] is None else f"{s['deviceSeconds']:g}s")
    con.print(grid)
    con.print(f"Device time  {p['deviceSeconds']:g}s in all")
    con.print(f"Created      {age(p['createdAt'])}" + (f" by {p['createdBy']}" if p.get("createdBy") else ""))


def _render_list(con, data) -> None:
    grid = table("PIPELINE", "PROJECT", "PHASE", "STAGES", "CREATED")
    for p in data["pipelines"]:
        done = p.get("count") or {}
        grid.add_row(p["pipelineId"][:12], p["project"], p["phase"].title(),
                     f"{done.get('done', 0)}/{done.get('total', len(p['stages']))}", age(p["createdAt"]))
    con.print(grid)
    con.print(footer(len(data["pipelines"]), "pipeline"))


def _render_dry_run(con, d: dict[str, Any], show_resolved: bool) -> None:
    con.print(f"Pipeline of {len(d['stages'])} stage(s) in project {d['project']}: nothing was started.")
    for s in d["stages"]:
        reads = ", ".join(f"{path} ← {name}" for path, name in s["reads"].items())
        con.print(f"  {s['name']} ({s['type']}): checked {s['checked']}" + (f"; reads {reads}" if reads else ""))
        for warning in s.get("warnings") or []:
            con.print(f"    [yellow]warning:[/] {warning}")
        if show_resolved and s.get("resolved"):
            con.print(json.dumps(s["resolved"], indent=2))
