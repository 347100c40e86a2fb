"""`akka training datasets analyze|analyses|logs`: measure a dataset under a base model, without a GPU."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from optimize.cli.common import client_for, command, fail
from optimize.cli.follow import Events, check_events, emit_final, follow_status
from optimize.cli.logs import add_logs_command
from optimize.cli.output import Output
from optimize.cli.render import DASH, age, footer, table

app = typer.Typer(help="Dataset analyses: token lengths under a base model, before any GPU.", no_args_is_help=True)
TERMINAL = ("done", "failed")


@command(app, "analyze")
def analyze(
    out: Output,
    dataset: Annotated[str, typer.Argument(help="NS/NAME[:vN|:ALIAS|@sha256:HEX]")],
    model: Annotated[str | None, typer.Option(
        "--model", help="Base model whose tokenizer and template measure the rows (default: the run file's).")] = None,
    run_file: Annotated[Path | None,
                        typer.Option("-f", "--file", help="Run file to estimate steps and time for.")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the report.")] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait at most.")] = 3600,
    events: Events = False,
) -> None:
    """Start an analysis (or read the one already kept for these examples, model commit and version)."""
    from optimize.schemas.plans import load_plan_text

    check_events(out, events, wait)
    plan = None
    if run_file is not None:
        try:
            plan = load_plan_text(run_file.read_text())
        except OSError as error:
            fail(f"cannot read {run_file}: {error.strerror}")
    with client_for(out) as api:
        analysis = api.analyses.start(dataset=dataset, model=model, plan=plan)
        if wait and analysis["phase"] not in TERMINAL:
            out.note(f"Analysis {analysis['analysisId'][:12]} {analysis['phase']} …")
            # rows measured of total (and an ETA) while it runs; the JSON answer is the one analysis (--events:
            # a JSON line per status before it)
            analysis = follow_status(api, out, "analyses", analysis["analysisId"], timeout, _headline, None,
                                     again=f"akka training datasets analyze {dataset} --wait", events=events)
            if run_file is not None and analysis["phase"] == "done":
                analysis = api.analyses.start(dataset=dataset, model=model, plan=plan)  # now with the estimates
    emit_final(out, analysis, _render, events)
    if wait and analysis["phase"] == "failed":
        raise typer.Exit(1)


@command(app, "analyses")
def analyses(out: Output, dataset: Annotated[str, typer.Argument(help="NS/NAME[:REF]")]) -> None:
    """The analyses kept for a dataset version's examples."""
    with client_for(out) as api:
        data = api.analyses.list(dataset=dataset)
    out.emit(data, _render_list)


add_logs_command(app, "analyses", "analysis")  # akka training datasets logs ANALYSIS [--attempt N] [--follow]


def _headline(item) -> str:
    """The headline of a followed analysis; its rows measured of total and ETA come from cli.progress."""
    failed = f"  — {item['reason'].splitlines()[0]}" if item["phase"] == "failed" and item.get("reason") else ""
    return f"{item['analysisId'][:12]} {item['phase']}{failed}"


def _render_list(con, data) -> None:
    grid = table("ANALYSIS", "PHASE", "ATTEMPT", "BASE MODEL", "COMMIT", "ROWS", "MAX", "CREATED")
    for item in data["analyses"]:
        report = item["report"] or {}
        rows = report.get("rows", report.get("pairs"))
        grid.add_row(item["analysisId"][:12], item["phase"], str(item["attempt"]), item["baseModel"],
                     item["baseModelCommit"][:12], str(rows) if rows is not None else DASH,
                     str(report.get("lengths", {}).get("max", DASH)), age(item["createdAt"]))
    con.print(grid)
    con.print(footer(len(data["analyses"]), "analysis"))


def _render(con, item) -> None:
    con.print(f"[bold]Analysis[/]   {item['analysisId'][:12]} — {item['phase']} (attempt {item['attempt']})")
    con.print(f"Dataset    {item['dataset']} ({item['examplesDigest'][:19]})")
    con.print(f"Base model {item['baseModel']} at {item['baseModelCommit'][:12]}")
    if item["phase"] == "failed":
        con.print(f"Failure    {item['reason']}" + (" (the dataset is refused)" if item["refused"] else ""))
        return
    report = item.get("report")
    if not report:
        return
    noun = "pairs" if "pairs" in report else "rows"
    lengths = report["lengths"]
    template = report["chatTemplate"]
    con.print(f"Tokenizer  {report['tokenizer']['repository']} at {report['tokenizer']['commit'][:12]}; "
              f"template {template['source']} (sha256 {template['sha256'][:12]}); Optimize {report['optimizeVersion']}")
    con.print(f"{noun.capitalize():<10} {report[noun]}")
    con.print(f"Lengths    median {lengths['median']}, p90 {lengths['p90']}, p99 {lengths['p99']}, "
              f"longest {lengths['max']} tokens")
    con.print(f"Suggested  maxSeqLength {report['suggestedMaxSeqLength']}")
    trained = report["trainedTokens"]
    con.print(f"Trained    {trained['default']} tokens by default, {trained['assistantTurnsAll']} with "
              "assistantTurns: all")
    grid = table("LIMIT", f"{noun.upper()} OVER", "STILL OVER TRIMMED")
    for limit in report["limits"]:
        grid.add_row(str(limit["limit"]), str(limit["over"]), str(limit["overTrimmed"]))
    con.print(grid)
    con.print("Longest    " + ", ".join(f"line {r['line']} ({r['length']})" for r in report["longest"][:5]))
    if report["findingCount"]:
        con.print(f"[bold]Template findings[/] ({report['findingCount']})")
        for finding in report["findings"][:20]:
            where = f", message {finding['message']}" if finding["message"] is not None else ""
            con.print(f"  line {finding['line']}{where}: {finding['reason']}")
    else:
        con.print("Template findings: none")
    estimates = item.get("estimates")
    if estimates:
        seconds = f"about {estimates['seconds']:.0f}s" if estimates["seconds"] is not None else "no time estimate"
        con.print(f"[bold]Estimates[/] {estimates['steps']} steps ({estimates['stepsPerEpoch']} an epoch, "
                  f"{estimates['sequencesPerUpdate']} sequences an update), {estimates['tokens']} tokens, {seconds}")
        con.print(f"  basis: {estimates['basis']}")
        if estimates.get("scale"):  # this deployment's runs of the same shape measured against their estimates
            con.print(f"  {estimates['scale']['basis']} (the catalog's throughput gives about "
                      f"{estimates['unscaledSeconds']:.0f}s)", markup=False)
        for value in estimates["inputs"]:
            source = "from the file" if value["source"] == "file" else "default"
            con.print(f"  {value['field']} = {value['value']} ({source})")
