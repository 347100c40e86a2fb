"""The `akka` root: `server`, `registry`, `training`, `auth`, `status` and `version` (and `optimize registry` as a
spelling of the same tree).

`main(argv)` returns the exit code; `run()` is the console-script entry point. No traceback reaches a user
unless OPTIMIZE_DEBUG is set. `akka --install-completion` installs shell completion for the shell it runs from
(`--show-completion` prints the script); the shell asks for completions through `_AKKA_COMPLETE`, which `main`
answers.
"""

from __future__ import annotations

import functools
import sys
from typing import Annotated

import typer

from optimize import __version__
from optimize.cli.commands import auth, registry, server, training
from optimize.cli.common import client_for, command
from optimize.cli.output import CommandFailed, Output, activate, print_error
from optimize.core.environment import setting

app = typer.Typer(
    name="akka",
    help="Optimize: register datasets, train, evaluate and serve open-weight models.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(server.app, name="server")
app.add_typer(registry.app, name="registry")
app.add_typer(training.app, name="training")
app.add_typer(auth.app, name="auth")

# `akka optimize registry ...` is accepted as a spelling of `akka registry ...`.
optimize_app = typer.Typer(help="The same commands, under the `akka optimize` spelling.", no_args_is_help=True)
optimize_app.add_typer(registry.app, name="registry")
optimize_app.add_typer(training.app, name="training")
app.add_typer(optimize_app, name="optimize")


def _print_version(asked: bool) -> None:
    if asked:
        print(__version__)
        raise typer.Exit()


@app.callback()
def root(version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                               help="Print the Optimize version and exit.")] = False) -> None:
    """Optimize: register datasets, train, evaluate and serve open-weight models."""


@command(app, "version")
def version(out: Output) -> None:
    """Print the Optimize version (`-o json`: {"version": …})."""
    out.emit({"version": __version__}, lambda con, data: con.print(data["version"], highlight=False))


@command(app, "status")
def status(out: Output) -> None:
    """The deployment at a glance: the server, jobs by kind and phase, device pools, the endpoints serving and the
    work queued for devices (as your token sees them). Exits 1 when no server answers."""
    from optimize.cli.status_view import render_status

    with client_for(out) as api:
        health = server.answering(api, out)
        answer = api.status()
    data = {"server": {"url": out.server, "version": health["version"], "database": health["database"]}, **answer}
    out.emit(data, render_status)


@functools.cache
def _command():
    """The command tree as Click runs it, built once per process: building it reads every command's signature
    (tens of milliseconds), which a process that calls `main` many times would otherwise pay each time."""
    return typer.main.get_command(app)


def main(argv: list[str] | None = None) -> int:
    activate(None)  # errors print as text until a command reads its -o / --jq
    command = _command()
    try:
        # Standalone mode prints usage errors itself and exits 2; our commands raise CommandFailed.
        command.main(args=argv, prog_name="akka", standalone_mode=True)
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    except CommandFailed as failure:
        return failure.code
    except KeyboardInterrupt:
        print_error("interrupted", code="interrupted")
        return 130
    except Exception as error:  # noqa: BLE001 - the process edge: report, never a traceback
        if _debugging():
            raise
        print_error(f"unexpected failure: {type(error).__name__}: {error}", "set OPTIMIZE_DEBUG=1 to see where",
                    code="unexpected")
        return 1
    finally:
        activate(None)
    return 0


def _debugging() -> bool:
    try:
        return setting("OPTIMIZE_DEBUG")
    except ValueError:  # set, though to neither on nor off: show the traceback it was set for
        return True


def run() -> None:
    sys.exit(main())
