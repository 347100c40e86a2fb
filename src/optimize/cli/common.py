"""The `command` decorator: adds `-o`, `--jq` and `--server` to every command and turns errors into exit codes.

Exit codes: 0 ok, 1 refused or failed, 2 usage (a malformed argument). Errors print one sentence (plus the
rows or hint it names) on stderr, never a traceback; in JSON modes (`-o json|json-compact`, `--jq`) they are one
`{"error": {...}}` object on stdout instead, usage errors a command raises itself included (`code: usage`, exit 2).
Click's own usage errors (an unknown option, a missing argument) come before the options are read, and stay as
Click prints them, on stderr.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from optimize.cli.output import MODES, CommandFailed, Output, activate, print_error
from optimize.core.environment import setting
from optimize.core.errors import PlatformError
from optimize.core.settings import DEFAULT_URL

if TYPE_CHECKING:  # the client (and httpx) load when a command first asks for one, so `--help` stays quick
    from optimize.client.api import OptimizeApi

_COMMON = [
    inspect.Parameter("click_context", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context),
    inspect.Parameter(
        "output", inspect.Parameter.KEYWORD_ONLY, default="text",
        annotation=Annotated[str, typer.Option("-o", "--output", help="Output: text, json or json-compact.")],
    ),
    inspect.Parameter(
        "jq", inspect.Parameter.KEYWORD_ONLY, default=None,
        annotation=Annotated[str | None, typer.Option("--jq", help="Filter the JSON output with a jq expression.")],
    ),
    inspect.Parameter(
        "server", inspect.Parameter.KEYWORD_ONLY, default=None,
        annotation=Annotated[str | None, typer.Option(
            "--server", help=f"URL of the Optimize server (env OPTIMIZE_URL, default {DEFAULT_URL}).")],
    ),
    inspect.Parameter(
        "token", inspect.Parameter.KEYWORD_ONLY, default=None,
        annotation=Annotated[str | None, typer.Option(
            "--token",
            help="API token (env OPTIMIZE_TOKEN; default: the one `akka auth login` stored for this server, else the "
                 "admin token of a server this user runs here).")],
    ),
]


def command(group: typer.Typer, name: str, **options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register `fn(..., out: Output)` as `group name` with the common options and error handling."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(fn)
        # Resolve string annotations in fn's own module, since the wrapper lives in this one.
        hints = typing.get_type_hints(fn, include_extras=True)
        own = [p.replace(annotation=hints.get(p.name, p.annotation))
               for p in signature.parameters.values() if p.name != "out"]

        @functools.wraps(fn)
        def wrapper(*args: Any, click_context: typer.Context, output: str, jq: str | None, server: str | None,
                    token: str | None, **kwargs: Any) -> None:
            if output not in MODES:
                raise typer.BadParameter(f"{output!r} is not one of {', '.join(MODES)}", param_hint="'-o'")
            out = Output(output, jq, server or setting("OPTIMIZE_URL"), token or setting("OPTIMIZE_TOKEN"))
            activate(out)
            try:
                run_reporting_errors(lambda: fn(*args, out=out, **kwargs))
            except typer.BadParameter as error:  # a usage error the command found itself
                if not out.is_json:
                    raise
                print_error(error.format_message(), f"see: {click_context.command_path} --help", code="usage")
                raise CommandFailed(error.exit_code) from None

        wrapper.__signature__ = signature.replace(parameters=own + _COMMON, return_annotation=None)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in own + _COMMON}
        group.command(name, **options)(wrapper)
        return fn

    return decorate


def run_reporting_errors(action: Callable[[], Any]) -> Any:
    from optimize.client.http import ApiError
    from optimize.client.registry import RowsRefused

    try:
        return action()
    except RowsRefused as error:
        lines = [f"{_where(item, error.unit)}: {item['reason']}" for item in error.errors]
        if error.count > len(error.errors):
            lines.append(f"… and {error.count - len(error.errors)} more bad {error.unit}(s)")
        print_error(str(error), f"fix the {error.unit}s named and try again", lines, code="invalid",
                    status=422, details={"errors": error.errors, "errorCount": error.count})
        raise CommandFailed(1) from None
    except ApiError as error:
        lines = [f"{_where(item, 'line')}: {item['reason']}" for item in error.body.get("errors", [])]
        print_error(error.message, error.hint, lines, code=error.code, status=error.status,
                    details={k: v for k, v in error.body.items() if k not in _PROBLEM_KEYS})
        raise CommandFailed(1) from None
    except PlatformError as error:
        print_error(error.message, error.hint, code=error.code, status=error.status, details=error.details)
        raise CommandFailed(1) from None


def _where(item: dict[str, Any], unit: str) -> str:
    """Where a refused row is: its line or row, or for prepared token rows its file and row in it."""
    if "file" in item:
        return item["file"] + (f" row {item['row']}" if item.get("row") else "")
    return f"{unit} {item.get(unit)}"


# What a problem+json body says that the JSON error names otherwise (`detail` is its `message`) or leaves out.
_PROBLEM_KEYS = frozenset({"type", "title", "status", "code", "detail", "hint"})


def client_for(out: Output, timeout: float = 60.0) -> OptimizeApi:
    """The typed client for `--server`; `timeout` is per request (longer for commands whose server work is long)."""
    from optimize.client.api import OptimizeApi
    from optimize.client.credentials import find_token

    return OptimizeApi.connect(out.server, timeout=timeout, token=find_token(out.server, out.token))


def parse_ref_argument(text: str, param: str = "reference"):
    """Parse a registry reference given on the command line; a malformed one is a usage error."""
    from optimize.core.refs import parse_reference

    try:
        return parse_reference(text)
    except PlatformError as error:
        raise typer.BadParameter(error.message, param_hint=param) from None


def fail(message: str, hint: str | None = None, code: int = 1) -> None:
    """Refuse with a sentence (and a hint): exit `code`, in JSON modes as `{"error": {"code": "failed", ...}}`."""
    print_error(message, hint, code="usage" if code == 2 else "failed")
    raise CommandFailed(code)


def read_schema(path: str) -> dict:
    """A JSON schema file, read here: a file that is not one JSON object is refused naming it."""
    import json
    from pathlib import Path

    try:
        schema = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        raise typer.BadParameter(f"{path} cannot be read as JSON ({error})", param_hint="'--response-schema'") \
            from None
    if not isinstance(schema, dict):
        raise typer.BadParameter(f"{path} holds no JSON schema (an object)", param_hint="'--response-schema'")
    return schema
