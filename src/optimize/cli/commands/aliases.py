"""`akka registry datasets|models|bundles alias set|get`: one alias group, written once for every registry noun
whose versions aliases name."""

from __future__ import annotations

from typing import Annotated

import typer

from optimize.cli.common import client_for, command
from optimize.cli.output import Output


def alias_group(noun: str, plural: str) -> typer.Typer:
    """The `alias` group of a noun whose client is `api.<plural>`."""
    group = typer.Typer(help=f"Move and read {noun} aliases.", no_args_is_help=True)

    @command(group, "set")
    def alias_set(
        out: Output,
        target: Annotated[str, typer.Argument(help="NS/NAME:ALIAS")],
        version: Annotated[str, typer.Option("--version", help="The version to point at (vN).")],
    ) -> None:
        """Point an alias at a version; its history is kept, with who moved it."""
        ref, alias = _alias_target(target)
        with client_for(out) as api:
            data = getattr(api, plural).set_alias(ref, alias, version=version)
        out.emit(data, lambda con, d: con.print(
            f"Alias {ref.artifact}:{d['alias']} {'now points at' if d['moved'] else 'already points at'} "
            f"{d['reference']}."))

    @command(group, "get")
    def alias_get(out: Output, target: Annotated[str, typer.Argument(help="NS/NAME:ALIAS")]) -> None:
        """Show the version an alias points at and every version it pointed at before."""
        ref, alias = _alias_target(target)
        with client_for(out) as api:
            out.emit(getattr(api, plural).get_alias(ref, alias), render_alias)

    return group


def render_alias(con, data) -> None:
    con.print(f"Alias {data['alias']} → {data['reference']}"
              + (" (managed by the registry)" if data["managed"] else ""))
    for move in data["history"]:
        by = f"  by {move['by']}" if move.get("by") else ""
        con.print(f"  v{move['version']}  since {move['since']}{by}")


def _alias_target(text: str):
    from optimize.core.errors import PlatformError
    from optimize.core.refs import parse_alias_target

    try:
        return parse_alias_target(text)
    except PlatformError as error:
        raise typer.BadParameter(error.message, param_hint="NS/NAME:ALIAS") from None
