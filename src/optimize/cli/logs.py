"""`akka training runs|evaluations|endpoints|datasets logs ID [--attempt N] [--follow]`: a job's worker log.

One command, added to each kind's group by one line (`add_logs_command(app, "runs", "run", …)`). It reads the log
through the typed client in chunks (`GET …/{id}/logs?attempt=&offset=`), each from the previous one's `nextOffset`:
text mode prints the log as the worker wrote it; `-o json` prints each answer as one JSON object per line (JSON
lines: every answer that carried text, and the first and the last). `--follow` keeps asking until the job is
settled and its log is drained; following the newest attempt, it moves on to a newer attempt when one starts.
Ctrl-C stops following and says that the job goes on.
"""

# no `from __future__ import annotations`: the command's annotations carry this kind's help texts, so they are
# built with the command rather than resolved later in the module's globals

import sys
import time
from typing import Annotated, Any

import typer

from optimize.cli.common import client_for, command
from optimize.cli.output import CommandFailed, Output, console

POLL_SECONDS = 1.0


def add_logs_command(app: typer.Typer, resource: str, noun: str, status: str | None = None) -> None:
    """Add `logs` to a kind's command group. `resource`: the typed client's attribute (`runs`, `analyses`, …);
    `noun`: the kind as a user names it; `status`: the command that shows one's status (`akka training runs get`)."""

    article = "an" if noun[0] in "aeiou" else "a"

    @command(app, "logs", help=f"The worker's log of {article} {noun}: what it printed in one attempt (default: "
                                f"the newest). --follow keeps showing it until the {noun} is settled.")
    def logs(
        out: Output,
        job: Annotated[str, typer.Argument(metavar=noun, help=f"The {noun}'s id or an unambiguous prefix.")],
        attempt: Annotated[int | None, typer.Option("--attempt", min=1, help="The attempt whose log to show "
                                                    "(default: the newest).")] = None,
        follow: Annotated[bool, typer.Option("--follow", help="Keep showing what the worker writes until the "
                                             f"{noun} is settled (Ctrl-C stops following; the {noun} goes on).")
                          ] = False,
    ) -> None:
        with client_for(out) as api:
            show_log(getattr(api, resource), out, noun, status, job, attempt, follow)


def show_log(resource: Any, out: Output, noun: str, status: str | None, job: str, attempt: int | None,
             follow: bool) -> None:
    """Print the log chunk by chunk until it is drained (with `follow`: and the job settled)."""
    pinned = attempt is not None
    offset, first, answer = 0, True, None
    try:
        while True:
            answer = resource.logs(job, attempt=attempt, offset=offset)
            job = answer["id"]
            if first and not out.is_json:
                _introduce(out, noun, answer, pinned)
            drained = answer["nextOffset"] >= answer["size"] or not answer["text"]
            newest = max(answer["attempts"], default=None)
            newer = follow and not pinned and newest is not None and newest != answer["attempt"]
            last = drained and not newer and (not follow or answer["settled"] or (pinned and newest != attempt))
            _print(out, answer, first or last)
            first = False
            if last:
                return
            offset = answer["nextOffset"]
            attempt = answer["attempt"]
            if drained and newer:  # the attempt followed is over: the newest goes on from its start
                out.note(f"— attempt {newest} of {noun} {job[:12]} —")
                attempt, offset = newest, 0
            elif drained:
                time.sleep(POLL_SECONDS)
    except KeyboardInterrupt:
        message = f"Stopped following the log of {noun} {job[:12]}"
        if answer is None or not answer["settled"]:
            message += f"; the {noun} goes on" + (f" (see it with: {status} {job[:12]})" if status else "")
        console(stderr=True).print(message + ".")
        raise CommandFailed(130) from None


def _introduce(out: Output, noun: str, answer: dict[str, Any], pinned: bool) -> None:
    """A line on stderr (stdout holds only the log) where the answer alone would leave a reader guessing."""
    attempts = answer["attempts"]
    if not attempts:
        out.note(f"{noun.capitalize()} {answer['id'][:12]} has no log{'' if answer['settled'] else ' yet'} "
                 f"({answer['phase']}).")
    elif len(attempts) > 1 and not pinned:
        out.note(f"Attempt {answer['attempt']} of {noun} {answer['id'][:12]} (attempts with logs: "
                 f"{', '.join(map(str, attempts))}; --attempt N shows another).")


def _print(out: Output, answer: dict[str, Any], always: bool) -> None:
    if out.is_json:
        if answer["text"] or always:  # JSON lines: one compact object per answer
            Output("json-compact", out.jq, out.server, out.token).emit(answer)
            sys.stdout.flush()
    elif answer["text"]:
        sys.stdout.write(answer["text"])
        sys.stdout.flush()
