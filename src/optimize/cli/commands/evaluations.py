"""`akka training evaluations start|get|list|wait|logs|cancel|retry|predictions`."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from optimize.cli.common import client_for, command, read_schema
from optimize.cli.follow import Events, check_events, follow_status
from optimize.cli.logs import add_logs_command
from optimize.cli.output import CommandFailed, Output
from optimize.cli.render import DASH, age, footer, table

app = typer.Typer(help="Evaluations: score a model's answers to a dataset with a grader.", no_args_is_help=True)
Evaluation = Annotated[str, typer.Argument(help="Evaluation id or unambiguous prefix.")]


@command(app, "start")
def start(
    out: Output,
    model: Annotated[str, typer.Option("--model", help="A base model, or a registered model NS/NAME[:vN].")],
    dataset: Annotated[str, typer.Option("--dataset", help="Chat dataset reference (NS/NAME[:vN|alias]).")],
    grader: Annotated[str, typer.Option("--grader", help="json-label-match (default), exact, contains, "
                                        "regex:PATTERN, numeric[:TOLERANCE], http:URL (or the http(s) "
                                        "URL alone), model:REF (a judge model) or bundle:NS/NAME#MODULE[:FUNCTION] "
                                        "(a registered scoring bundle's function; FUNCTION defaults to "
                                        "compute_score).")] = "json-label-match",
    grader_instructions: Annotated[str | None, typer.Option("--grader-instructions", help="With model:REF: the "
                                                            "judge's instructions (default: a trained judge's own, "
                                                            "else built-in).")] = None,
    project: Annotated[str | None, typer.Option("--project", help="The project it counts for (a base model "
                                                "names none; a registered model its own).")] = None,
    max_new_tokens: Annotated[int | None, typer.Option("--max-new-tokens", min=1, help="Answer length limit "
                                                       "(default 256).")] = None,
    generations: Annotated[int | None, typer.Option("--generations", help="Answers sampled per prompt (default 1, "
                                                    "greedy; more: a sampling evaluation that reports how often a "
                                                    "prompt's answers all score the same).")] = None,
    temperature: Annotated[float | None, typer.Option("--temperature", help="Sampling temperature (default: "
                                                      "greedy for one answer, 0.7 for several).")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Seed of the sampled answers (default 0).")] = None,
    rows: Annotated[int | None, typer.Option("--rows", help="Ask only the first N rows.")] = None,
    response_schema: Annotated[str | None, typer.Option("--response-schema", help="A JSON schema file: every "
                                                        "answer keeps to it (constrained decoding).")] = None,
    device_profile: Annotated[str | None, typer.Option("--device-profile", help="Where the model answers (default: "
                                                       "cpu; a model allowed for serving only needs a GPU "
                                                       "profile).")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Follow it until it ends.")] = False,
    exit_status: Annotated[bool, typer.Option("--exit-status", help="With --wait: exit 1 unless it completes.")
                           ] = False,
    events: Events = False,
) -> None:
    """Start an evaluation: the model answers each row's prompt on a device of its own; the grader scores it."""
    if exit_status and not wait:
        raise typer.BadParameter("--exit-status needs --wait", param_hint="'--exit-status'")
    check_events(out, events, wait)
    with client_for(out) as api:
        answer = api.evaluations.start(model=model, dataset=dataset, grader=grader, project=project,
                                       max_new_tokens=max_new_tokens, grader_instructions=grader_instructions,
                                       generations=generations, temperature=temperature, seed=seed, rows=rows,
                                       device_profile=device_profile,
                                       response_schema=read_schema(response_schema) if response_schema else None)
        if not wait:
            out.emit(answer, lambda con, e: con.print(
                f"Evaluation {e['evaluationId'][:12]} of {e['model']} on {e['dataset']['reference']} "
                f"{e['phase'].title()}; follow it with: akka training evaluations wait {e['evaluationId'][:12]}"))
            return
        out.note(f"Evaluation {answer['evaluationId'][:12]} submitted.")
        _follow(api, out, answer["evaluationId"], None, exit_status, events)


@command(app, "get")
def get(out: Output, evaluation: Evaluation) -> None:
    """Show an evaluation: its model, dataset, grader, phase and report."""
    with client_for(out) as api:
        out.emit(api.evaluations.get(evaluation), _render)


@command(app, "list")
def list_evaluations(
    out: Output,
    project: Annotated[str | None, typer.Option("--project", help="Only this project's.")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Only this model's (a prefix of its reference).")
                     ] = None,
    phase: Annotated[str | None, typer.Option("--phase", help="open or a phase, e.g. COMPLETED.")] = None,
    archived: Annotated[bool, typer.Option("--archived", help="Include archived projects' evaluations.")] = False,
) -> None:
    """List evaluations, newest first (an archived project's only with --archived or --project)."""
    with client_for(out) as api:
        out.emit(api.evaluations.list(project=project, model=model, phase=phase, archived=archived), _render_list)


@command(app, "wait")
def wait(out: Output, evaluation: Evaluation,
         exit_status: Annotated[bool, typer.Option("--exit-status", help="Exit 1 unless it completes.")] = False,
         timeout: Annotated[float | None, typer.Option("--timeout", help="Give up after this many seconds.")] = None,
         events: Events = False) -> None:
    """Follow an evaluation until it ends: a line per change, then the evaluation (-o json: the evaluation alone;
    --events: a JSON line per status first)."""
    check_events(out, events)
    with client_for(out) as api:
        _follow(api, out, evaluation, timeout, exit_status, events)


add_logs_command(app, "evaluations", "evaluation", status="akka training evaluations get")


@command(app, "cancel")
def cancel(out: Output, evaluation: Evaluation) -> None:
    """Cancel an evaluation; its answers so far are kept."""
    with client_for(out) as api:
        answer = api.evaluations.cancel(evaluation)
    out.emit(answer, lambda con, e: con.print(f"Evaluation {e['evaluationId'][:12]} {e['phase'].title()}."))


@command(app, "retry")
def retry(out: Output, evaluation: Evaluation,
          wait: Annotated[bool, typer.Option("--wait", help="Follow it until it ends.")] = False,
          events: Events = False) -> None:
    """Run an ended evaluation again: a base model resolves to the commit selected now, and only the rows not
    answered from that commit are asked again."""
    check_events(out, events, wait)
    with client_for(out) as api:
        answer = api.evaluations.retry(evaluation)
        if not wait:
            out.emit(answer, lambda con, e: con.print(
                f"Evaluation {e['evaluationId'][:12]} queued again at base commit {e['baseModel']['commit'][:12]}; "
                f"{e['progress']['answered']} of {e['progress']['total']} answers kept"))
            return
        _follow(api, out, answer["evaluationId"], None, False, events)


@command(app, "predictions")
def predictions(out: Output, evaluation: Evaluation,
                limit: Annotated[int | None, typer.Option("--limit", min=1, help="Only the first N.")] = None) -> None:
    """Each answer with its expected answer, score, and what it was answered from."""
    with client_for(out) as api:
        out.emit(api.evaluations.predictions(evaluation, limit=limit), _render_predictions)


def _follow(api, out: Output, evaluation_id: str, timeout: float | None, exit_status: bool, events: bool) -> None:
    final = follow_status(api, out, "evaluations", evaluation_id, timeout, _line, _render, events=events)
    if exit_status and final["phase"] != "COMPLETED":
        raise CommandFailed(1)


def follow_quietly(api, out: Output, evaluation_id: str) -> dict[str, Any]:
    """Follow an evaluation to its end with its progress lines and return it, leaving the output to the caller."""
    follow_status(api, out, "evaluations", evaluation_id, None, _line, None)
    return api.evaluations.get(evaluation_id)


def _line(e: dict[str, Any]) -> str:
    """The headline of a followed evaluation; its answers of total and ETA come from cli.progress."""
    parts = [f"{e['evaluationId'][:12]} {e['phase'].title()}"]
    if e.get("waitingFor"):
        parts.append(f"— {e['waitingFor']}")
    if e.get("failureReason"):
        parts.append(f"— {e['failureReason'].splitlines()[0]}")
    return "  ".join(parts)


def _score(value: float | None) -> str:
    return DASH if value is None else f"{value:.3f}"


def _render(con, e: dict[str, Any]) -> None:
    p, r = e.get("progress") or {}, e.get("report") or {}
    con.print(f"[bold]Evaluation[/]  {e['evaluationId']}")
    con.print(f"Project     {e['project']}")
    con.print(f"Model       {e['model']} (base {e['baseModel']['id']} at {e['baseModel']['commit'][:12]})")
    con.print(f"Dataset     {e['dataset']['reference']} — {e['dataset']['rows']} example(s)")
    con.print(f"Grader      {e['grader']}")
    if e.get("sampling") or e.get("rows"):
        con.print(f"Asked       {sampling_words(e)}")
    con.print(f"Phase       {e['phase'].title()} (attempt {e['attempt']}), answered {p.get('answered', 0)} of "
              f"{p.get('total', 0)}")
    if e.get("waitingFor"):
        con.print(f"Waiting     {e['waitingFor']}")
    if e.get("failureReason"):
        con.print(f"[red]Failure[/]     {e['failureReason'].splitlines()[0]}")
    if r:
        con.print(f"Mean score  {_score(r.get('meanScore'))} over {r['scored']} scored ({r['unscored']} unscored)")
        con.print(f"Exact match {_score(r.get('exactMatchRate'))}")
        for item in r.get("perFieldAccuracy", [])[:10]:
            con.print(f"  {item['field']:<20} {item['accuracy']:.3f} of {item['examples']}")
        if r.get("sampling"):
            con.print(f"Groups      {spread_words(r['sampling'])}")
    con.print(f"Created     {age(e['createdAt'])}")


def sampling_words(e: dict[str, Any]) -> str:
    """How an evaluation asked: the first rows, and the answers sampled per prompt."""
    rows = f"the first {e['rows']} rows" if e.get("rows") else "every row"
    sampling = e.get("sampling")
    if not sampling:
        return f"{rows}, one greedy answer each"
    return (f"{rows}, {sampling['generations']} answers each sampled at temperature {sampling['temperature']:g} "
            f"(seed {sampling['seed']})")


def spread_words(s: dict[str, Any]) -> str:
    """A sampling evaluation's spread: its answers' score spread and the prompts whose answers all scored alike."""
    std = DASH if s.get("std") is None else f"{s['std']:.3f}"
    share = DASH if s.get("zeroVarianceShare") is None else f"{s['zeroVarianceShare']:.0%}"
    return (f"{s['answers']} answers, score std {std}; zero-variance share {share} of {s['groups']} prompt(s) "
            "(all answers scored alike: a reinforcement update learns nothing from them)")


def _render_list(con, data) -> None:
    grid = table("EVALUATION", "PROJECT", "MODEL", "DATASET", "GRADER", "PHASE", "MEAN SCORE", "CREATED")
    for e in data["evaluations"]:
        grid.add_row(e["evaluationId"][:12], e["project"] + (" (archived)" if e.get("projectArchived") else ""),
                     e["model"], e["dataset"]["reference"], e["grader"],
                     e["phase"].title(), _score((e.get("report") or {}).get("meanScore")), age(e["createdAt"]))
    con.print(grid)
    con.print(footer(len(data["evaluations"]), "evaluation"))


def _render_predictions(con, data) -> None:
    grid = table("LINE", "SCORE", "EXPECTED", "ANSWER", "BASE COMMIT")
    for p in data["predictions"]:
        grid.add_row(str(p["line"]), _score(p["score"]), p["expected"][:40], p["answer"][:40],
                     p["baseModelRevision"][:12])
    con.print(grid)
    con.print(footer(len(data["predictions"]), "prediction"))
