"""`akka training curations apply|get|list|wait|logs|cancel|rejections`.

A curation has a judge model score each candidate of a project's sessions against its instructions; the candidates
scored at its threshold or more are registered as the next version of its chat dataset. `apply -f FILE` reads the
request (YAML or JSON), refuses a malformed field before asking the server, and gives it a curationId when it has
none, so a retried request reaches the same curation. The renderers below (`render_applied`, `render`,
`render_list`, `render_rejections`, `render_cancelled`, `follow_line`) take the JSON the server answers and nothing
else, so they are tested without a server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from optimize.cli.common import client_for, command, fail
from optimize.cli.follow import Events, check_events, follow_status
from optimize.cli.logs import add_logs_command
from optimize.cli.output import CommandFailed, Output
from optimize.cli.render import DASH, age, footer, table

app = typer.Typer(help="Curations: a judge model scores a project's session candidates; the kept ones become a "
                       "dataset version.", no_args_is_help=True)
CurationArg = Annotated[str, typer.Argument(help="Curation id, an unambiguous prefix, or its curationId.")]
DETAIL_WIDTH = 48
OUTPUT_WIDTH = 60
INSTRUCTIONS_WIDTH = 80


def read_request(path: str) -> dict[str, Any]:
    """The request document of `-f FILE` (YAML or JSON), checked field by field as the server checks it, with a
    curationId made where it has none."""
    import json

    import yaml

    from optimize.core.errors import Invalid
    from optimize.core.ids import new_id
    from optimize.schemas.curations import CurationRequest

    if path == "-":
        fail("the curation request is read from a file", "pass -f FILE (YAML or JSON)")
    try:
        text = Path(path).read_text()
    except OSError as error:
        fail(f"cannot read {path}: {error.strerror}")
    except UnicodeDecodeError:
        fail(f"{path} is not UTF-8 text")
    try:
        document = json.loads(text) if text.lstrip().startswith("{") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as error:
        fail(f"{path} is not valid YAML or JSON: {error}")
    try:
        CurationRequest.parse(document)
    except Invalid as error:
        fail(f"{path}: {error.message}", error.hint)
    if not document.get("curationId"):
        document["curationId"] = new_id()  # a retried request reaches the same curation
    return document


@command(app, "apply")
def apply(
    out: Output,
    file: Annotated[str, typer.Option("-f", "--file", help="The curation request (YAML or JSON): sessionHashes, "
                                      "judge, instructions, threshold, dataset, and optionally curationId, project, "
                                      "systemPrompt, deviceProfile, source.")],
    wait: Annotated[bool, typer.Option("--wait", help="Follow it until it ends.")] = False,
    exit_status: Annotated[bool, typer.Option("--exit-status", help="With --wait: exit 1 unless it completes.")
                           ] = False,
    events: Events = False,
) -> None:
    """Start a curation (or reach the one its curationId names): the judge scores each candidate of the sessions;
    the kept ones are registered as the dataset's next version."""
    if exit_status and not wait:
        raise typer.BadParameter("--exit-status needs --wait", param_hint="'--exit-status'")
    check_events(out, events, wait)
    request = read_request(file)
    with client_for(out) as api:
        answer, status = api.curations.apply(request)
        if not wait:
            out.emit(answer, lambda con, d: render_applied(con, d, created=status == 202))
            return
        verb = "submitted" if status == 202 else "already applied"
        out.note(f"Curation {answer['curationId'][:12]} ({answer['key']}) {verb}.")
        _follow(api, out, answer["curationId"], None, exit_status, events)


@command(app, "get")
def get(out: Output, curation: CurationArg) -> None:
    """Show a curation: its judge and commit, sessions, instructions, threshold, progress and what it registered."""
    with client_for(out) as api:
        out.emit(api.curations.get(curation), render)


@command(app, "list")
def list_curations(
    out: Output,
    project: Annotated[str | None, typer.Option("--project", help="Only this project's.")] = None,
    phase: Annotated[str | None, typer.Option("--phase", help="open or a phase, e.g. COMPLETED.")] = None,
    archived: Annotated[bool, typer.Option("--archived", help="Include archived projects' curations.")] = False,
) -> None:
    """List curations, newest first (an archived project's only with --archived or --project)."""
    with client_for(out) as api:
        out.emit(api.curations.list(project=project, phase=phase, archived=archived), render_list)


@command(app, "wait")
def wait(out: Output, curation: CurationArg,
         exit_status: Annotated[bool, typer.Option("--exit-status", help="Exit 1 unless it completes.")] = False,
         timeout: Annotated[float | None, typer.Option("--timeout", help="Give up after this many seconds.")] = None,
         events: Events = False) -> None:
    """Follow a curation until it ends: a line per change, then the curation (-o json: the curation alone;
    --events: a JSON line per status first)."""
    check_events(out, events)
    with client_for(out) as api:
        _follow(api, out, curation, timeout, exit_status, events)


add_logs_command(app, "curations", "curation", status="akka training curations get")


@command(app, "cancel")
def cancel(out: Output, curation: CurationArg) -> None:
    """Cancel a curation (queued or judging); nothing is registered."""
    with client_for(out) as api:
        answer = api.curations.cancel(curation)
    out.emit(answer, render_cancelled)


@command(app, "rejections")
def rejections(out: Output, curation: CurationArg,
               reason: Annotated[str | None, typer.Option("--reason", help="Only those rejected for this reason: "
                                                          "below_threshold, unscored or prompt_too_long.")] = None,
               limit: Annotated[int | None, typer.Option("--limit", min=1, help="Only the first N.")] = None) -> None:
    """The rejected candidates: each with why, its score and what the judge replied."""
    with client_for(out) as api:
        out.emit(api.curations.rejections(curation, reason=reason, limit=limit), render_rejections)


def _follow(api, out: Output, curation_id: str, timeout: float | None, exit_status: bool, events: bool) -> None:
    final = follow_status(api, out, "curations", curation_id, timeout, follow_line, render, events=events)
    if exit_status and final["phase"] != "COMPLETED":
        raise CommandFailed(1)


# --- renderers: the server's JSON in, text out ---------------------------------------------------------------


def by_reason(counts: dict[str, int] | None) -> str:
    """`below_threshold 2, unscored 1`: rejected candidates by reason, the most first."""
    ordered = sorted((counts or {}).items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{reason} {count}" for reason, count in ordered if count)


def progress_words(p: dict[str, Any]) -> str:
    """`4/5 judged, 3 kept, 1 rejected (unscored 1)`."""
    text = (f"{p.get('judged', 0)}/{p.get('total', 0)} judged, {p.get('kept', 0)} kept, "
            f"{p.get('rejected', 0)} rejected")
    reasons = by_reason(p.get("rejectedByReason"))
    return text + (f" ({reasons})" if reasons else "")


def sessions_words(sessions: list[dict[str, Any]]) -> str:
    """`0c4f…e1 (oasst1, 5 candidates), …`."""
    return ", ".join(f"{s['sessionHash'][:12]}… ({s['source']}, {s['candidates']} candidate"
                     f"{'' if s['candidates'] == 1 else 's'})" for s in sessions)


def registered_words(r: dict[str, Any]) -> str:
    return f"{r['reference']} ({r['digest']}, {r['rows']} row{'' if r['rows'] == 1 else 's'})"


def phase_line(d: dict[str, Any]) -> str:
    held = d.get("devicesHeld") or []
    devices = f"holding {', '.join(held)}" if held else "no devices held"
    return f"{d['phase'].title()} (attempt {d['attempt']}), {devices}"


def trim(text: str | None, width: int) -> str:
    """The first line of `text`, cut to `width` characters with `…` where anything was left out."""
    if not text:
        return DASH
    lines = text.strip().splitlines() or [""]
    first = lines[0]
    if len(first) > width:
        return first[:width - 1] + "…"
    return first + ("…" if len(lines) > 1 else "") if first else DASH


def _field(con, label: str, value: str, style: str = "") -> None:
    """One `Label  value` line; the value printed as text, never read as markup."""
    con.print(Text.assemble((f"{label:<14}", style), value))


def render(con, d: dict[str, Any]) -> None:
    """`get`: the curation, a line a fact."""
    judge = d["judge"]
    _field(con, "Curation", f"{d['curationId']} ({d['key']})", "bold")
    _field(con, "Project", d["project"])
    _field(con, "Judge", f"{judge['reference']} (base {judge['baseModel']['id']} at "
                         f"{judge['baseModel']['commit'][:12]}" + ("; asked where an endpoint serves it)"
                                                                   if judge.get("endpoint") else ")"))
    _field(con, "Sessions", sessions_words(d["sessions"]))
    _field(con, "Instructions", trim(d["instructions"], INSTRUCTIONS_WIDTH)
           + f" ({len(d['instructions']):,} characters, sha256 {d['instructionsSha256'][:12]}…)")
    _field(con, "Threshold", f"kept at a score of {d['threshold']:g} or more")
    if d.get("systemPrompt"):
        _field(con, "System prompt", trim(d["systemPrompt"], INSTRUCTIONS_WIDTH))
    _field(con, "Dataset", d["dataset"])
    _field(con, "Phase", phase_line(d) + f"; device profile {d['deviceProfile']}")
    if d.get("waitingFor"):
        _field(con, "Waiting", d["waitingFor"])
    _field(con, "Progress", progress_words(d.get("progress") or {}))
    if d.get("registered"):
        _field(con, "Registered", registered_words(d["registered"]))
    if d.get("failureReason"):
        _field(con, "Failure", d["failureReason"].splitlines()[0], "red")
    _field(con, "Created", age(d["createdAt"]))
    if d.get("finishedAt"):
        _field(con, "Finished", age(d["finishedAt"]))


def render_applied(con, d: dict[str, Any], created: bool = True) -> None:
    short = d["curationId"][:12]
    what = "" if created else " (already applied)"
    con.print(Text(f"Curation {short} ({d['key']}){what} judging {d['progress']['total']} candidates with "
                   f"{d['judge']['reference']} -> {d['dataset']} {d['phase'].title()}; follow it with: "
                   f"akka training curations wait {short}"))


def render_cancelled(con, d: dict[str, Any]) -> None:
    nothing = "" if d.get("registered") else "; nothing was registered"
    con.print(Text(f"Curation {d['curationId'][:12]} {d['phase'].title()}{nothing}."))


def render_list(con, data: dict[str, Any]) -> None:
    grid = table("ID", "KEY", "PROJECT", "JUDGE", "DATASET", "PHASE", "JUDGED", "KEPT", "AGE")
    for d in data["curations"]:
        p = d.get("progress") or {}
        grid.add_row(d["curationId"][:12], d["key"], d["project"] + (" (archived)" if d.get("projectArchived") else ""),
                     d["judge"]["reference"], d["dataset"], d["phase"].title(),
                     f"{p.get('judged', 0)}/{p.get('total', 0)}", str(p.get("kept", 0)), age(d["createdAt"]))
    con.print(grid)
    con.print(footer(len(data["curations"]), "curation"))


def render_rejections(con, data: dict[str, Any]) -> None:
    counts = data.get("rejectedByReason") or {}
    total = sum(counts.values())
    if not total and not data["rejections"]:
        con.print(Text("No candidate was rejected."))
        return
    con.print(Text(f"Rejected {total} in all" + (f": {by_reason(counts)}" if total else "")))
    grid = table("#", "CANDIDATE", "REASON", "SCORE", "DETAIL", "JUDGE'S REPLY")
    for r in data["rejections"]:
        grid.add_row(str(r["position"]), r["candidate"], r["reason"],
                     DASH if r.get("score") is None else f"{r['score']:g}", trim(r.get("detail"), DETAIL_WIDTH),
                     trim(r.get("output"), OUTPUT_WIDTH))
    con.print(grid)
    con.print(footer(len(data["rejections"]), "rejection"))


def follow_line(d: dict[str, Any]) -> str:
    """The headline of a followed curation; its candidates judged of total and kept come from cli.progress."""
    parts = [f"{d['curationId'][:12]} {d['phase'].title()}"]
    if d.get("waitingFor"):
        parts.append(f"— {d['waitingFor']}")
    if d.get("failureReason"):
        parts.append(f"— {d['failureReason'].splitlines()[0]}")
    elif d.get("registered"):
        parts.append(f"— registered {d['registered']['reference']}")
    return "  ".join(parts)
