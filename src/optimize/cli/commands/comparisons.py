"""`akka training comparisons create|get|list|wait|cancel|answers`."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from optimize.cli.common import client_for, command
from optimize.cli.follow import Events, check_events, follow_status
from optimize.cli.output import CommandFailed, Output
from optimize.cli.render import DASH, age, footer, table

app = typer.Typer(help="Comparisons: a snapshot's model and its branches scored side by side; the winner named and "
                       "promoted.", no_args_is_help=True)
Comparison = Annotated[str, typer.Argument(help="Comparison id or unambiguous prefix.")]


@command(app, "create")
def create(
    out: Output,
    source: Annotated[str, typer.Option("--source", help="The source snapshot: its weights are scored beside the "
                                        "candidates (registered as a model version if they were not).")],
    dataset: Annotated[str, typer.Option("--dataset", help="The registered evaluation dataset every model answers "
                                         "(NS/NAME[:vN|:ALIAS]).")],
    candidate: Annotated[list[str] | None, typer.Option("--candidate", help="A registered model to compare "
                                                        "(NS/NAME[:vN|:ALIAS]); may be repeated.")] = None,
    branch: Annotated[list[str] | None, typer.Option("--branch", help="A completed run whose model is compared; may "
                                                     "be repeated.")] = None,
    all_branches: Annotated[list[str] | None, typer.Option("--all-branches", help="A parent run: every completed "
                                                           "branch of it from the source snapshot is compared.")
                            ] = None,
    grader: Annotated[str | None, typer.Option("--grader", help="The grader of every answer, as evaluations take it "
                                               "(default json-label-match).")] = None,
    grader_instructions: Annotated[str | None, typer.Option("--grader-instructions", help="With model:REF: the "
                                                            "judge's instructions.")] = None,
    max_new_tokens: Annotated[int | None, typer.Option("--max-new-tokens", min=1, help="The completion-token "
                                                       "budget of every answer (default 256).")] = None,
    device_profile: Annotated[str | None, typer.Option("--device-profile", help="Where its evaluations run "
                                                       "(default cpu).")] = None,
    promote: Annotated[str | None, typer.Option("--promote", help="Move this alias (e.g. champion) to the winner "
                                                "when the result is Complete and its margin clears --margin.")
                       ] = None,
    margin: Annotated[float | None, typer.Option("--margin", min=0, help="The least margin over the runner-up a "
                                                 "promotion needs (default 0).")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Follow it until it ends.")] = False,
    exit_status: Annotated[bool, typer.Option("--exit-status", help="With --wait: exit 1 unless it completes "
                                              "with a Complete result.")] = False,
    events: Events = False,
) -> None:
    """Compare a source snapshot's model with candidates on one dataset and grader: an evaluation each (reused where
    one was done for the same version, dataset version, grader and budget), then the scores with their intervals
    and the winner."""
    if exit_status and not wait:
        raise typer.BadParameter("--exit-status needs --wait", param_hint="'--exit-status'")
    check_events(out, events, wait)
    with client_for(out) as api:
        answer = api.comparisons.create(
            source=source, dataset=dataset, candidates=candidate, branches=branch, all_branches=all_branches,
            grader=grader, grader_instructions=grader_instructions, max_new_tokens=max_new_tokens,
            device_profile=device_profile, promote=promote, margin=margin)
        if not wait:
            out.emit(answer, lambda con, c: con.print(
                f"Comparison {c['comparisonId'][:12]} of {len(c['entries'])} models on {c['dataset']['reference']} "
                f"{c['phase'].title()} ({_reused(c)}); follow it with: akka training comparisons wait "
                f"{c['comparisonId'][:12]}"))
            return
        out.note(f"Comparison {answer['comparisonId'][:12]} created ({_reused(answer)}).")
        _follow(api, out, answer["comparisonId"], None, exit_status, events)


@command(app, "get")
def get(out: Output, comparison: Comparison) -> None:
    """Show a comparison: its models, their scores with intervals, the winner, the spend and any promotion."""
    with client_for(out) as api:
        out.emit(api.comparisons.get(comparison), _render)


@command(app, "list")
def list_comparisons(
    out: Output,
    project: Annotated[str | None, typer.Option("--project", help="Only this project's.")] = None,
    phase: Annotated[str | None, typer.Option("--phase", help="open or a phase, e.g. COMPLETED.")] = None,
) -> None:
    """List comparisons, newest first."""
    with client_for(out) as api:
        out.emit(api.comparisons.list(project=project, phase=phase), _render_list)


@command(app, "wait")
def wait(out: Output, comparison: Comparison,
         exit_status: Annotated[bool, typer.Option("--exit-status", help="Exit 1 unless it completes with a "
                                                   "Complete result.")] = False,
         timeout: Annotated[float | None, typer.Option("--timeout", help="Give up after this many seconds.")] = None,
         events: Events = False) -> None:
    """Follow a comparison until it ends, then show it."""
    check_events(out, events)
    with client_for(out) as api:
        _follow(api, out, comparison, timeout, exit_status, events)


@command(app, "cancel")
def cancel(out: Output, comparison: Comparison) -> None:
    """Cancel a comparison and the evaluations it started that nothing else waits for."""
    with client_for(out) as api:
        answer = api.comparisons.cancel(comparison)
    out.emit(answer, lambda con, c: con.print(f"Comparison {c['comparisonId'][:12]} {c['phase'].title()}."))


@command(app, "answers")
def row_answers(out: Output, comparison: Comparison,
                line: Annotated[int, typer.Option("--line", min=1, help="The dataset's line (from 1).")] = 1
                ) -> None:
    """Every compared model's answer to one row, side by side."""
    with client_for(out) as api:
        out.emit(api.comparisons.row(comparison, line), _render_row)


def _follow(api, out: Output, comparison_id: str, timeout: float | None, exit_status: bool, events: bool) -> None:
    final = follow_status(api, out, "comparisons", comparison_id, timeout, _line, _render, events=events)
    if exit_status and (final["phase"] != "COMPLETED" or final.get("result") != "Complete"):
        raise CommandFailed(1)


def _reused(c: dict[str, Any]) -> str:
    reused = sum(1 for e in c["entries"] if e["reused"])
    return f"{len(c['entries']) - reused} evaluation(s) started, {reused} reused"


def _line(c: dict[str, Any]) -> str:
    """The headline of a followed comparison; its evaluations ended of all come from cli.progress."""
    parts = [f"{c['comparisonId'][:12]} {c['phase'].title()}"]
    if c.get("failureReason"):
        parts.append(f"— {c['failureReason'].splitlines()[0]}")
    return "  ".join(parts)


def _score(value: float | None) -> str:
    return DASH if value is None else f"{value:.3f}"


def _signed(value: float | None) -> str:
    return DASH if value is None else f"{value:+.3f}"


def _render(con, c: dict[str, Any]) -> None:
    s = c["source"]
    con.print(f"[bold]Comparison[/]  {c['comparisonId']}")
    con.print(f"Project     {c['project']}")
    con.print(f"Source      snapshot {s['snapshotId'][:12]} (run {s['runId'][:12]}, step {s['step']}) as {s['model']}")
    con.print(f"Dataset     {c['dataset']['reference']} — {c['dataset']['rows']} row(s)")
    con.print(f"Grader      {c['grader']}, at most {c['maxNewTokens']} tokens an answer")
    for f in c.get("fans") or []:
        skipped = ", ".join(f"{x['runId'][:12]} {x['phase'].title()}" for x in f["skipped"])
        con.print(f"Fan         run {f['parentRunId'][:12]}: {f['compared']} of {f['branches']} branch(es) compared"
                  + (f" (not: {skipped})" if skipped else ""))
    count = c.get("count") or {}
    con.print(f"Phase       {c['phase'].title()}" + (f", {count['done']} of {count['total']} evaluations ended"
                                                     if count else ""))
    if c.get("failureReason"):
        con.print(f"[red]Failure[/]     {c['failureReason'].splitlines()[0]}")
    if c.get("result"):
        con.print(f"Result      {c['result']}")
        grid = table("MODEL", "ROLE", "MEAN SCORE", "95% INTERVAL", "ROWS", "VS SOURCE")
        for x in c["scores"]:
            grid.add_row(x["model"], x["role"], _score(x["meanScore"]), f"{x['low']:.3f} – {x['high']:.3f}",
                         str(x["rows"]), _signed(x["versusSource"]))
        con.print(grid)
    else:
        grid = table("MODEL", "ROLE", "EVALUATION", "PHASE", "REUSED")
        for e in c["entries"]:
            grid.add_row(e["model"], e["role"], e["evaluationId"][:12], e["evaluationPhase"].title(),
                         "yes" if e["reused"] else "no")
        con.print(grid)
    for f in c.get("failed") or []:
        con.print(f"[red]Not scored[/]  {f['model']}: evaluation {f['evaluationId'][:12]} {f['phase'].title()}"
                  + (f" — {f['reason'].splitlines()[0]}" if f.get("reason") else ""))
    w = c.get("winner")
    if w:
        con.print(f"Winner      {w['model']} ({w['role']}), {_score(w['meanScore'])}: by {w['margin']:+.3f} over "
                  f"{w['runnerUp']} (95% interval {w['marginLow']:+.3f} – {w['marginHigh']:+.3f})")
    elif c.get("result") == "Partial":
        con.print("Winner      none: a Partial result names no winner")
    elif c.get("result"):
        con.print("Winner      none: the top two tie")
    p = c.get("promotion")
    if p:
        con.print(f"Promotion   {p['alias']} → {p['model']}" + ("" if p["moved"] else " (it pointed there already)")
                  if p.get("model") else f"Promotion   {p['alias']} not moved: {p['whyNot']}")
    spend = c.get("spend")
    if spend:
        con.print(f"Spend       training {spend['training']['deviceSeconds']:g} device-s; this comparison "
                  f"{spend['comparison']['deviceSeconds']:g} device-s ({spend['evaluationsStarted']} evaluation(s) "
                  f"started, {spend['evaluationsReused']} reused)")
    con.print(f"Created     {age(c['createdAt'])}" + (f" by {c['createdBy']}" if c.get("createdBy") else ""))


def _render_list(con, data) -> None:
    grid = table("COMPARISON", "PROJECT", "SOURCE", "MODELS", "DATASET", "PHASE", "RESULT", "WINNER", "CREATED")
    for c in data["comparisons"]:
        grid.add_row(c["comparisonId"][:12], c["project"], c["source"]["model"], str(len(c["entries"])),
                     c["dataset"]["reference"], c["phase"].title(), c.get("result") or DASH,
                     (c.get("winner") or {}).get("model") or DASH, age(c["createdAt"]))
    con.print(grid)
    con.print(footer(len(data["comparisons"]), "comparison"))


def _render_row(con, data) -> None:
    con.print(f"Line {data['line']} of {data['lines']}")
    con.print(f"Prompt    {(data.get('prompt') or DASH)[:400]}")
    con.print(f"Expected  {(data.get('expected') or DASH)[:400]}")
    grid = table("MODEL", "ROLE", "SCORE", "ANSWER")
    for a in data["answers"]:
        grid.add_row(a["model"], a["role"], _score(a["score"]), (a["answer"] or DASH)[:200])
    con.print(grid)
