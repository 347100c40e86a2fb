"""`akka training distillations create|get|list|wait|logs|pause|resume|cancel|rejections`.

A distillation has a teacher answer every decision (assistant message) of a chat dataset; the answers it accepts
are registered as the next version of the target dataset. The renderers below (`render_created`, `render`,
`render_list`, `render_rejections`, `render_paused`, `render_resumed`, `render_cancelled`, `follow_line`) take
the JSON the server answers and nothing else, so they are tested without a server.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.text import Text

from optimize.cli.common import client_for, command, read_schema
from optimize.cli.follow import Events, check_events, follow_status
from optimize.cli.logs import add_logs_command
from optimize.cli.output import CommandFailed, Output
from optimize.cli.render import DASH, age, footer, table

app = typer.Typer(help="Distillations: a teacher answers a chat dataset's decisions; the accepted answers become "
                       "a dataset version.", no_args_is_help=True)
Distillation = Annotated[str, typer.Argument(help="Distillation id or unambiguous prefix.")]
THINKING = {"on": True, "off": False}
DETAIL_WIDTH = 40
OUTPUT_WIDTH = 60
INSTRUCTIONS_WIDTH = 80


@command(app, "create")
def create(
    out: Output,
    teacher: Annotated[str, typer.Option("--teacher", help="The teacher: a base model (serving-only models "
                                         "included) or a registered model NS/NAME[:vN|:ALIAS].")],
    source: Annotated[str, typer.Option("--from", help="The chat dataset whose decisions it answers: "
                                        "NS/NAME[:vN|:ALIAS|@sha256:HEX].")],
    target: Annotated[str, typer.Option("--to", help="NS/NAME the accepted rows are registered under, as its next "
                                        "version.")],
    project: Annotated[str | None, typer.Option("--project", help="The project it counts for (a base model names "
                                                "none; a registered teacher its own).")] = None,
    replicas: Annotated[int | None, typer.Option("--replicas", min=1, help="Devices answering at once, one a "
                                                 "replica (default 1).")] = None,
    max_tokens: Annotated[int | None, typer.Option("--max-tokens", min=1, help="Most tokens of one answer "
                                                   "(default 4096).")] = None,
    max_model_length: Annotated[int | None, typer.Option("--max-model-length", min=1, help="Most tokens of a "
                                                         "prompt and its answer (default 65536).")] = None,
    temperature: Annotated[float | None, typer.Option("--temperature", help="Sampling temperature (default 1.0; "
                                                      "0: greedy).")] = None,
    top_p: Annotated[float | None, typer.Option("--top-p", help="Nucleus sampling's probability mass (default "
                                                "1.0).")] = None,
    seed: Annotated[int | None, typer.Option("--seed", min=0, help="Seed of the sampled answers (default 0).")
                    ] = None,
    smoke: Annotated[str | None, typer.Option("--smoke", metavar="ROW:MSG,...", help="The smoke's decisions, "
                                              "zero-based, all of which must be accepted (default: the first 16, "
                                              "all but one accepted).")] = None,
    thinking: Annotated[str | None, typer.Option("--thinking", metavar="on|off", help="Let a Gemma 4 teacher "
                                                 "think; its reasoning is stripped from the rows (default off).")
                        ] = None,
    device_profile: Annotated[str | None, typer.Option("--device-profile", help="Where it answers (default: where "
                                                       "the catalog serves the teacher, else cpu).")] = None,
    acceptance_floor: Annotated[float | None, typer.Option("--acceptance-floor", min=0.0, max=1.0, help="The "
                                                           "share of answers accepted below which it warns "
                                                           "(default 0.2; 0: never).")] = None,
    instructions: Annotated[str | None, typer.Option("--instructions", metavar="TEXT", help="The teacher's "
                                                     "system prompt, in place of each row's own system message "
                                                     "(the registered rows keep their own).")] = None,
    accept_grader: Annotated[str | None, typer.Option("--accept-grader", metavar="GRADER", help="Also score each "
                                                      "accepted answer against the row's own answer, as "
                                                      "`evaluations start --grader` does (exact, contains, "
                                                      "regex:PATTERN, numeric[:TOL], json-label-match, http:URL, "
                                                      "bundle:NS/NAME#MODULE[:FUNCTION]); with --min-score.")
                             ] = None,
    min_score: Annotated[float | None, typer.Option("--min-score", min=0.0, max=1.0, help="With --accept-grader: "
                                                    "the least score an answer kept has (0 to 1); one below it, or "
                                                    "unscored, is rejected as below_min_score.")] = None,
    response_schema: Annotated[str | None, typer.Option("--response-schema", help="A JSON schema file: every "
                                                        "answer of the teacher keeps to it (constrained "
                                                        "decoding).")] = None,
    submission_id: Annotated[str | None, typer.Option("--submission-id", metavar="ID", help="An idempotency key: "
                                                      "the same command again with it reaches the same "
                                                      "distillation.")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Follow it until it ends (or is paused).")] = False,
    exit_status: Annotated[bool, typer.Option("--exit-status", help="With --wait: exit 1 unless it completes.")
                           ] = False,
    events: Events = False,
) -> None:
    """Start a distillation: the teacher answers each decision of the source (first the smoke's); the accepted
    answers are registered as the target's next version."""
    if exit_status and not wait:
        raise typer.BadParameter("--exit-status needs --wait", param_hint="'--exit-status'")
    if (accept_grader is None) != (min_score is None):
        given, missing = ("--accept-grader", "--min-score") if min_score is None else ("--min-score", "--accept-grader")
        raise typer.BadParameter(f"{given} needs {missing}: an answer is scored by the grader and kept at the "
                                 "least score", param_hint=f"'{given}'")
    check_events(out, events, wait)
    think = parse_thinking(thinking)
    with client_for(out) as api:
        answer = api.distillations.create(teacher=teacher, source=source, target=target, project=project,
                                          replicas=replicas, max_tokens=max_tokens,
                                          max_model_length=max_model_length, temperature=temperature, top_p=top_p,
                                          seed=seed, smoke=smoke, thinking=think, device_profile=device_profile,
                                          acceptance_floor=acceptance_floor, instructions=instructions,
                                          accept_grader=accept_grader, min_score=min_score,
                                          submission_id=submission_id,
                                          response_schema=read_schema(response_schema) if response_schema else None)
        if not wait:
            out.emit(answer, render_created)
            return
        out.note(f"Distillation {answer['distillationId'][:12]} submitted.")
        _follow(api, out, answer["distillationId"], None, exit_status, events)


@command(app, "get")
def get(out: Output, distillation: Distillation) -> None:
    """Show a distillation: its teacher, source, target, settings, phase, progress, smoke and what it registered."""
    with client_for(out) as api:
        out.emit(api.distillations.get(distillation), render)


@command(app, "list")
def list_distillations(
    out: Output,
    project: Annotated[str | None, typer.Option("--project", help="Only this project's.")] = None,
    phase: Annotated[str | None, typer.Option("--phase", help="open or a phase, e.g. COMPLETED.")] = None,
    archived: Annotated[bool, typer.Option("--archived", help="Include archived projects' distillations.")] = False,
) -> None:
    """List distillations, newest first (an archived project's only with --archived or --project)."""
    with client_for(out) as api:
        out.emit(api.distillations.list(project=project, phase=phase, archived=archived), render_list)


@command(app, "wait")
def wait(out: Output, distillation: Distillation,
         exit_status: Annotated[bool, typer.Option("--exit-status", help="Exit 1 unless it completes.")] = False,
         timeout: Annotated[float | None, typer.Option("--timeout", help="Give up after this many seconds.")] = None,
         events: Events = False) -> None:
    """Follow a distillation until it ends or is paused: a line per change, then the distillation (-o json: the
    distillation alone; --events: a JSON line per status first)."""
    check_events(out, events)
    with client_for(out) as api:
        _follow(api, out, distillation, timeout, exit_status, events)


add_logs_command(app, "distillations", "distillation", status="akka training distillations get")


@command(app, "pause")
def pause(out: Output, distillation: Distillation) -> None:
    """Pause a distillation: it stops answering and releases its devices; the answers it saved are kept."""
    with client_for(out) as api:
        answer = api.distillations.pause(distillation)
    out.emit(answer, render_paused)


@command(app, "resume")
def resume(out: Output, distillation: Distillation) -> None:
    """Resume a paused distillation: it is queued again and goes on from the answers it saved."""
    with client_for(out) as api:
        answer = api.distillations.resume(distillation)
    out.emit(answer, render_resumed)


@command(app, "cancel")
def cancel(out: Output, distillation: Distillation) -> None:
    """Cancel a distillation; nothing is registered."""
    with client_for(out) as api:
        answer = api.distillations.cancel(distillation)
    out.emit(answer, render_cancelled)


@command(app, "rejections")
def rejections(out: Output, distillation: Distillation,
               reason: Annotated[str | None, typer.Option("--reason", help="Only those rejected for this reason, "
                                                          "e.g. empty or max_tokens.")] = None,
               limit: Annotated[int | None, typer.Option("--limit", min=1, help="Only the first N.")] = None) -> None:
    """The rejected answers: each decision with why it was rejected and what the teacher answered."""
    with client_for(out) as api:
        out.emit(api.distillations.rejections(distillation, reason=reason, limit=limit), render_rejections)


def parse_thinking(value: str | None) -> bool | None:
    """`--thinking on|off` as the body's bool; None when not given (the server's default applies)."""
    if value is None:
        return None
    if value.lower() not in THINKING:
        raise typer.BadParameter(f"{value!r} is not on or off", param_hint="'--thinking'")
    return THINKING[value.lower()]


def _follow(api, out: Output, distillation_id: str, timeout: float | None, exit_status: bool, events: bool) -> None:
    final = follow_status(api, out, "distillations", distillation_id, timeout, follow_line, render, events=events)
    if final["phase"] == "PAUSED":  # settled, not ended: the follow stops here and says how to go on
        short = final["distillationId"][:12]
        out.note(f"Distillation {short} is paused; resume it with: akka training distillations resume {short}")
    if exit_status and final["phase"] != "COMPLETED":
        raise CommandFailed(1)


# --- renderers: the server's JSON in, text out ---------------------------------------------------------------


def phase_words(d: dict[str, Any]) -> str:
    """`Running (answering)`: the phase, and the stage while it runs."""
    return d["phase"].title() + (f" ({d['stage']})" if d.get("stage") else "")


def by_reason(counts: dict[str, int] | None) -> str:
    """`empty 2, max_tokens 1`: rejected answers by reason, the most first."""
    ordered = sorted((counts or {}).items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{reason} {count}" for reason, count in ordered if count)


def progress_words(p: dict[str, Any]) -> str:
    """`40/100 answered, 38 accepted, 2 rejected (empty 1, max_tokens 1)`; before its worker has read the source
    (no decisions counted), a dash."""
    if not p.get("decisions") and not p.get("answered"):
        return f"{DASH} (the source's decisions are not counted yet)"
    text = (f"{p.get('answered', 0)}/{p.get('decisions', 0)} answered, {p.get('accepted', 0)} accepted, "
            f"{p.get('rejected', 0)} rejected")
    reasons = by_reason(p.get("rejectedByReason"))
    return text + (f" ({reasons})" if reasons else "")


def acceptance_words(d: dict[str, Any]) -> str:
    """`92% (37 of 40 decided), floor 20%`; a dash before anything is decided."""
    a = d.get("acceptance") or {}
    floor = f"floor {a['floor']:.0%}" if a.get("floor") is not None else ""
    if not a.get("decided"):
        return f"{DASH} (nothing decided yet){', ' + floor if floor else ''}"
    text = f"{a['rate']:.0%} ({a['accepted']} of {a['decided']} decided)"
    return f"{text}, {floor}" + (" — below it" if a.get("belowFloor") else "") if floor else text


def settings_words(d: dict[str, Any]) -> str:
    """The settings as resolved, defaults filled in."""
    s = d["settings"]
    smoke = ", ".join(s["smoke"]) if s.get("smoke") else "the first 16"
    return (f"replicas {s['replicas']}, max tokens {s['maxTokens']}, max model length {s['maxModelLength']}, "
            f"temperature {s['temperature']:g}, top-p {s['topP']:g}, seed {s['seed']}, "
            f"thinking {'on' if s['thinking'] else 'off'}, smoke {smoke}; device profile {d['deviceProfile']}")


def smoke_words(smoke: dict[str, Any]) -> str:
    """`16 decisions, 15 accepted, passed`, `…, failed on 0:1, 3:1`, or `…, not judged yet`."""
    text = f"{len(smoke['decisions'])} decisions, {smoke['accepted']} accepted, "
    if smoke.get("passed") is None:
        return text + "not judged yet"
    if smoke["passed"]:
        return text + "passed"
    return text + "failed" + (f" on {', '.join(smoke['failed'])}" if smoke.get("failed") else "")


def registered_words(r: dict[str, Any]) -> str:
    """`NS/NAME:v1 (sha256:…, 40 rows)`."""
    return f"{r['reference']} ({r['digest']}, {r['rows']} row{'' if r['rows'] == 1 else 's'})"


def phase_line(d: dict[str, Any]) -> str:
    """The phase and stage, the attempt, and the devices it holds."""
    held = d.get("devicesHeld") or []
    devices = f"holding {', '.join(held)}" if held else "no devices held"
    return f"{phase_words(d)} (attempt {d['attempt']}), {devices}"


def _field(con, label: str, value: str, style: str = "") -> None:
    """One `Label  value` line; the value printed as text, never read as markup."""
    con.print(Text.assemble((f"{label:<14}", style), value))


def render(con, d: dict[str, Any]) -> None:
    """`get`: the distillation, a line a fact."""
    base = d["baseModel"]
    _field(con, "Distillation", d["distillationId"], "bold")
    _field(con, "Project", d["project"])
    _field(con, "Teacher", f"{d['teacher']} (base {base['id']} at {base['commit'][:12]})")
    _field(con, "Source", f"{d['source']['reference']} — {d['source']['rows']} row(s)")
    _field(con, "Target", d["target"])
    _field(con, "Settings", settings_words(d))
    s = d["settings"]
    if s.get("acceptGrader"):
        _field(con, "Accepting", f"scored by {s['acceptGrader']}, kept at {s['minScore']:g} or more")
    if s.get("instructions"):
        _field(con, "Instructions", trim(s["instructions"], INSTRUCTIONS_WIDTH)
               + f" ({len(s['instructions']):,} characters)")
    _field(con, "Phase", phase_line(d))
    if d.get("waitingFor"):
        _field(con, "Waiting", d["waitingFor"])
    _field(con, "Progress", progress_words(d.get("progress") or {}))
    if d.get("acceptance"):
        _field(con, "Acceptance", acceptance_words(d))
    for warning in d.get("warnings") or []:
        _field(con, "Warning", warning, "yellow")
    _field(con, "Smoke", smoke_words(d["smoke"]) if d.get("smoke") else f"{DASH} (not started)")
    if d.get("registered"):
        _field(con, "Registered", registered_words(d["registered"]))
    if d.get("failureReason"):
        _field(con, "Failure", d["failureReason"].splitlines()[0], "red")
    _field(con, "Created", age(d["createdAt"]))
    if d.get("finishedAt"):
        _field(con, "Finished", age(d["finishedAt"]))


def render_created(con, d: dict[str, Any]) -> None:
    short = d["distillationId"][:12]
    con.print(Text(f"Distillation {short} of teacher {d['teacher']} over {d['source']['reference']} -> "
                   f"{d['target']} {phase_words(d)}; follow it with: akka training distillations wait {short}"))


def render_paused(con, d: dict[str, Any]) -> None:
    short = d["distillationId"][:12]
    if d["phase"] == "PAUSED":
        con.print(Text(f"Distillation {short} paused; resume it with: akka training distillations resume {short}"))
    else:
        con.print(Text(f"Distillation {short} {phase_words(d)}; follow it with: "
                       f"akka training distillations wait {short}"))


def render_resumed(con, d: dict[str, Any]) -> None:
    short, p = d["distillationId"][:12], d.get("progress") or {}
    kept = (f"; {p.get('answered', 0)} of {p['decisions']} decisions answered are kept" if p.get("decisions")
            else "")
    con.print(Text(f"Distillation {short} {phase_words(d)}{kept}; follow it with: "
                   f"akka training distillations wait {short}"))


def render_cancelled(con, d: dict[str, Any]) -> None:
    nothing = "" if d.get("registered") else "; nothing was registered"
    con.print(Text(f"Distillation {d['distillationId'][:12]} {phase_words(d)}{nothing}."))


def render_list(con, data: dict[str, Any]) -> None:
    grid = table("ID", "PROJECT", "TEACHER", "SOURCE", "TARGET", "PHASE", "PROGRESS", "ACCEPTED", "AGE")
    for d in data["distillations"]:
        p = d.get("progress") or {}
        grid.add_row(d["distillationId"][:12], d["project"] + (" (archived)" if d.get("projectArchived") else ""),
                     d["teacher"], d["source"]["reference"], d["target"], phase_words(d),
                     f"{p.get('answered', 0)}/{p.get('decisions', 0)}", str(p.get("accepted", 0)),
                     age(d["createdAt"]))
    con.print(grid)
    con.print(footer(len(data["distillations"]), "distillation"))


def trim(text: str | None, width: int) -> str:
    """The first line of `text`, cut to `width` characters with `…` where anything was left out."""
    if not text:
        return DASH
    lines = text.strip().splitlines() or [""]
    first = lines[0]
    if len(first) > width:
        return first[:width - 1] + "…"
    return first + ("…" if len(lines) > 1 else "") if first else DASH


def render_rejections(con, data: dict[str, Any]) -> None:
    counts = data.get("rejectedByReason") or {}
    total = sum(counts.values())
    if not total and not data["rejections"]:
        con.print(Text("No answer was rejected."))
        return
    con.print(Text(f"Rejected {total} in all" + (f": {by_reason(counts)}" if total else "")))
    grid = table("DECISION", "REASON", "DETAIL", "OUTPUT")
    for r in data["rejections"]:
        grid.add_row(r["decision"], r["reason"], trim(r.get("detail"), DETAIL_WIDTH),
                     trim(r.get("output"), OUTPUT_WIDTH))
    con.print(grid)
    con.print(footer(len(data["rejections"]), "rejection"))


def follow_line(d: dict[str, Any]) -> str:
    """The headline of a followed distillation; its decisions answered of total, the accepted and the ETA come
    from cli.progress."""
    parts = [f"{d['distillationId'][:12]} {phase_words(d)}"]
    if d.get("waitingFor"):
        parts.append(f"— {d['waitingFor']}")
    smoke = d.get("smoke") or {}
    if d.get("failureReason"):
        parts.append(f"— {d['failureReason'].splitlines()[0]}")
    elif smoke.get("passed") is False:
        parts.append(f"— smoke {smoke_words(smoke)}")
    elif (d.get("acceptance") or {}).get("belowFloor"):
        a = d["acceptance"]
        parts.append(f"— acceptance {a['rate']:.0%} below the floor of {a['floor']:.0%}")
    return "  ".join(parts)
