"""`akka registry bundles register|get|versions|list|check|alias set|alias get`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from optimize.cli.commands.aliases import alias_group
from optimize.cli.common import client_for, command, parse_ref_argument
from optimize.cli.output import Output, console
from optimize.cli.render import DASH, age, footer, table
from optimize.cli.safe_text import safe_markup
from optimize.core.sizes import human_size
from optimize.scoring.groups import MOSTLY_CONSTANT

app = typer.Typer(help="Scoring bundles (immutable ZIP archives of Python modules and data): register, read, list, "
                       "alias.", no_args_is_help=True)
app.add_typer(alias_group("bundle", "bundles"), name="alias")

_FILE_HELP = ("The bundle's directory (packaged deterministically: every file, hidden and cache files included, and "
              "empty directories; symbolic links refused) or a ZIP file, sent exactly as it is.")
_SHOWN_MEMBERS = 50
# the check runs on the server while the command waits: its import (30 s), field scan (60 s) and scoring (120 s, plus
# one row's limit) are each bounded there
_CHECK_TIMEOUT_S = 330.0


@command(app, "register")
def register(
    out: Output,
    bundle: Annotated[str, typer.Argument(help="NS/NAME to register the bundle under.")],
    file: Annotated[Path, typer.Option("-f", "--file", help=_FILE_HELP)],
    alias: Annotated[str | None, typer.Option("--alias", help="Point this alias at the registered version.")] = None,
) -> None:
    """Register a bundle as a new version (or return the version the same bytes already are)."""
    from optimize.client.bundles import register_bundle

    reference = parse_ref_argument(bundle, "NS/NAME")
    if reference.selector != "latest":
        raise typer.BadParameter(f"register into {reference.artifact}, without a version or alias",
                                 param_hint="NS/NAME")
    with client_for(out) as api:
        version = register_bundle(api, reference, file, alias=alias)
    out.emit(version, _render_registered)


@command(app, "get")
def get_bundle(out: Output, reference: Annotated[str, typer.Argument(help="NS/NAME[:vN|:ALIAS|@sha256:HEX]")]) -> None:
    """Show a version (the newest when no version is named) with its members."""
    ref = parse_ref_argument(reference)
    with client_for(out) as api:
        out.emit(api.bundles.get(ref), _render_version)


@command(app, "versions")
def versions(out: Output, bundle: Annotated[str, typer.Argument(help="NS/NAME")]) -> None:
    """List a bundle's versions, newest first."""
    ref = parse_ref_argument(bundle, "NS/NAME")
    with client_for(out) as api:
        out.emit(api.bundles.versions(ref), _render_versions)


@command(app, "list")
def list_bundles(
    out: Output,
    namespace: Annotated[str | None, typer.Option("--namespace", help="Only this namespace (archived or not).")] = None,
    archived: Annotated[bool, typer.Option("--archived", help="Include archived namespaces.")] = False,
) -> None:
    """List bundles with their newest version."""
    with client_for(out) as api:
        out.emit(api.bundles.list(namespace=namespace, archived=archived), _render_list)


@command(app, "check")
def check(
    out: Output,
    reference: Annotated[str, typer.Argument(help="NS/NAME[:vN|:ALIAS|@sha256:HEX]")],
    dataset: Annotated[str, typer.Option("--dataset", help="The chat dataset to check on: NS/NAME[:vN|:ALIAS].")],
    function: Annotated[str | None, typer.Option(
        "--function", help="MODULE[:FUNCTION] to check (FUNCTION by default compute_score). Default: "
                           "reward:compute_score, or the compute_score of a bundle's only module.")] = None,
    samples: Annotated[int, typer.Option("--samples", min=1, max=1000,
                                         help="How many of the dataset's first rows to score.")] = 64,
    time_limit: Annotated[float | None, typer.Option(
        "--time-limit", help="Seconds each row's scoring may take (default 10, at most 60), as a reward term's "
                             "timeLimitSeconds.")] = None,
    model: Annotated[str | None, typer.Option(
        "--model", help="Also score this model's sampled answers to the same rows (a base model or NS/NAME[:vN]): "
                        "a sampling evaluation on a device, followed to its end.")] = None,
    project: Annotated[str | None, typer.Option(
        "--project", help="With --model: the project the sampling counts for (needed for a base model).")] = None,
    generations: Annotated[int | None, typer.Option(
        "--generations", min=2, max=16, help="With --model: answers sampled per prompt (default 4).")] = None,
    temperature: Annotated[float | None, typer.Option(
        "--temperature", help="With --model: their temperature (default 0.7, a reinforcement run's).")] = None,
    max_new_tokens: Annotated[int | None, typer.Option(
        "--max-new-tokens", min=1, help="With --model: most tokens per answer (default 128).")] = None,
) -> None:
    """Check a bundle's function against a dataset: it imports, the row fields its module declares (FIELDS) are in
    every row, and the first rows' own final answers score (mean, spread, unscored, errors with their lines). With
    --model, the model's sampled answers to those rows are scored too, and the share of prompts whose answers all
    score alike (which a GRPO update cannot learn from) is measured."""
    sampling_options = {"--project": project, "--generations": generations, "--temperature": temperature,
                        "--max-new-tokens": max_new_tokens}
    stray = [name for name, value in sampling_options.items() if value is not None]
    if stray and model is None:
        raise typer.BadParameter(f"{', '.join(stray)} go with --model", param_hint="'--model'")
    ref = parse_ref_argument(reference)
    with client_for(out, timeout=_CHECK_TIMEOUT_S) as api:
        report = api.bundles.check(ref, dataset=dataset, function=function, samples=samples, model=model,
                                   time_limit_s=time_limit, project=project, generations=generations,
                                   temperature=temperature, max_new_tokens=max_new_tokens)
        if report.get("sampling"):
            report = _with_sampled(api, out, report)
    out.emit(report, _render_check)


def _with_sampled(api, out: Output, report: dict) -> dict:
    """The check with its sampling evaluation followed to its end: the evaluation's report beside the check's."""
    from optimize.cli.commands.evaluations import follow_quietly

    sampling = report["sampling"]
    if not out.is_json:
        console().print(f"Sampling {sampling['model']}: {sampling['generations']} answers to each of the first "
                        f"{sampling['rows']} rows at temperature {sampling['temperature']:g} (evaluation "
                        f"{sampling['evaluationId'][:12]})", markup=False)
    evaluation = follow_quietly(api, out, sampling["evaluationId"])
    return {**report, "sampling": {**sampling, "evaluation": evaluation}}


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _contents(item) -> str:
    return f"{_plural(item['files'], 'file')}, {_plural(len(item['modules']), 'module')}"


def _modules(item) -> str:
    shown = item["modules"][:10]
    more = len(item["modules"]) - len(shown)
    return safe_markup(", ".join(shown)) + (f" and {more} more" if more else "")


def _render_registered(con, item) -> None:
    upload = item["upload"]
    verb = "Registered" if item.get("created") else "Already registered:"
    con.print(f"{verb} [bold]{item['reference']}[/] — {_contents(item)}")
    con.print(f"  Digest   {item['digest']}")
    source = "packaged from the directory" if upload["packaged"] else "the ZIP file as given"
    sent = "sent" if upload["sent"] else "already held, not sent"
    con.print(f"  Archive  {human_size(upload['bytes'])}, {source}; {sent}")
    con.print(f"  Modules  {_modules(item)}")
    if item["aliases"]:
        con.print(f"  Aliases  {', '.join(item['aliases'])}")


def _render_version(con, item) -> None:
    con.print(f"[bold]Bundle[/]    {item['reference']}" + (" (archived)" if item["archived"] else ""))
    con.print(f"Version   v{item['version']} of {item['versionCount']}")
    con.print(f"Digest    {item['digest']}")
    con.print(f"Archive   {human_size(item['bytes'])} ({human_size(item['uncompressedBytes'])} unpacked)")
    con.print(f"Contents  {_contents(item)}"
              + (f", {_plural(item['directories'], 'empty directory')}" if item["directories"] else ""))
    con.print(f"Modules   {_modules(item)}")
    con.print(f"Aliases   {', '.join(item['aliases']) or DASH}")
    con.print(f"Created   {age(item['createdAt'])}")
    grid = table("MEMBER", "SIZE")
    members = item.get("members", [])
    for member in members[:_SHOWN_MEMBERS]:
        grid.add_row(safe_markup(member["path"]), DASH if member["path"].endswith("/") else human_size(member["bytes"]))
    con.print(grid)
    if len(members) > _SHOWN_MEMBERS:
        con.print(f"(the first {_SHOWN_MEMBERS} of {len(members)} members; -o json lists them all)")


def _render_versions(con, data) -> None:
    grid = table("REFERENCE", "FILES", "MODULES", "SIZE", "ALIASES", "DIGEST", "CREATED")
    for item in data["versions"]:
        grid.add_row(item["reference"], str(item["files"]), str(len(item["modules"])), human_size(item["bytes"]),
                     ", ".join(item["aliases"]) or DASH, item["digest"][:19], age(item["createdAt"]))
    con.print(grid)
    con.print(footer(len(data["versions"]), "version"))


def _render_list(con, data) -> None:
    grid = table("BUNDLE", "VERSIONS", "LATEST", "FILES", "MODULES", "SIZE", "CREATED")
    for item in data["bundles"]:
        name = item["bundle"] + (" (archived)" if item["archived"] else "")
        latest = item["latest"]
        grid.add_row(name, str(item["versions"]), f"v{latest['version']}", str(latest["files"]),
                     str(len(latest["modules"])), human_size(latest["bytes"]), age(latest["createdAt"]))
    con.print(grid)
    con.print(footer(len(data["bundles"]), "bundle"))


def _figure(value) -> str:
    return DASH if value is None else f"{value:.4g}"


def _render_check(con, report) -> None:
    con.print(f"Checked [bold]{report['bundle']}[/] {safe_markup(report['function'])} on {report['dataset']}")
    con.print(f"  Import    ok ({report['isolation'] or 'isolation unknown'})")
    fields = report["fields"]
    if fields:
        where = (f"every row ({report['datasetRows']:,})" if report["fieldRowsChecked"] >= report["datasetRows"]
                 else f"the first {report['fieldRowsChecked']:,} of {report['datasetRows']:,} rows")
        con.print(f"  Fields    {safe_markup(', '.join(fields))} — in {where}")
    else:
        con.print("  Fields    none declared (FIELDS), not checked")
    errors = report["errors"]
    parts = [f"{report['scored']} scored", f"{report['unscored']} unscored (None)",
             f"{errors['count']} error{'' if errors['count'] == 1 else 's'}"]
    if report["withoutAnswer"]:
        parts.append(f"{report['withoutAnswer']} without an answer")
    if report["notReached"]:
        parts.append(f"{report['notReached']} not reached")
    con.print(f"  Rows      {report['rows']} of the first {report['samples']}: {', '.join(parts)}")
    con.print(f"  Score     mean {_figure(report['mean'])}  std {_figure(report['std'])}  "
              f"min {_figure(report['min'])}  max {_figure(report['max'])}")
    for item in errors["first"]:
        con.print(f"  Error     line {item['line']}: {safe_markup(item['error'])}")
    if errors["count"] > len(errors["first"]):
        con.print(f"            … and {errors['count'] - len(errors['first'])} more")
    sampling = report.get("sampling")
    evaluation = (sampling or {}).get("evaluation")
    if evaluation is None:
        con.print(f"  Groups    zero-variance share {DASH} (needs --model: several sampled answers per prompt)")
    else:
        _render_sampled(con, sampling, evaluation)
    for note in report["notes"]:
        if not note.startswith("zeroVarianceShare"):  # said on the Groups line
            con.print(f"  Note      {safe_markup(note)}")


def _render_sampled(con, sampling: dict, evaluation: dict) -> None:
    """The sampled answers' lines: their scores, and the prompts whose answers all scored alike."""
    from optimize.cli.commands.evaluations import spread_words

    con.print(f"  Sampled   {safe_markup(sampling['model'])}, {sampling['generations']} answers per prompt at "
              f"temperature {sampling['temperature']:g} — evaluation {evaluation['evaluationId'][:12]} "
              f"{evaluation['phase'].title()}")
    r = evaluation.get("report")
    if evaluation["phase"] != "COMPLETED" or not r:
        reason = (evaluation.get("failureReason") or "").splitlines()[:1]
        con.print(f"  Groups    not measured{': ' + safe_markup(reason[0]) if reason else ''}")
        return
    spread = r.get("sampling") or {}
    con.print(f"  Answers   mean {_figure(r.get('meanScore'))}  std {_figure(spread.get('std'))}  "
              f"{r['scored']} scored, {r['unscored']} unscored or errors")
    con.print(f"  Groups    {safe_markup(spread_words(spread))}")
    share = spread.get("zeroVarianceShare")
    if share is not None and share > MOSTLY_CONSTANT:
        con.print(f"  [yellow]Warning[/]   on {share:.0%} of the prompts every sampled answer scored the same: a GRPO "
                  "run learns only from the others (vary the reward, raise the temperature or the generations)")
