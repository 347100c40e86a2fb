"""`akka auth login|logout|whoami` and `akka auth tokens create|list|revoke` (administrators)."""

from __future__ import annotations

from typing import Annotated

import typer

from optimize.cli.common import client_for, command, fail
from optimize.cli.output import Output
from optimize.cli.render import DASH, age, footer, table

app = typer.Typer(help="API tokens: log in to a server, see who you are, issue and revoke tokens.",
                  no_args_is_help=True)
tokens_app = typer.Typer(help="Issue, list and revoke API tokens (administrators).", no_args_is_help=True)
app.add_typer(tokens_app, name="tokens")


@command(app, "login")
def login(out: Output) -> None:
    """Check a token against --server and keep it for that server (~/.optimize/credentials.json, mode 0600): give
    it with --token or OPTIMIZE_TOKEN, or type it when asked."""
    from optimize.client.api import OptimizeApi
    from optimize.client.credentials import store_token

    token = out.token or typer.prompt("API token", hide_input=True).strip()
    with OptimizeApi.connect(out.server, token=token) as api:
        caller = api.tokens.whoami()
    path = store_token(out.server, token)
    out.emit({**caller, "server": out.server, "storedIn": str(path)}, _render_login)


@command(app, "logout")
def logout(out: Output) -> None:
    """Forget the token kept for --server."""
    from optimize.client.credentials import store_token

    path = store_token(out.server, None)
    out.emit({"server": out.server, "storedIn": str(path)},
             lambda con, d: con.print(f"Forgot the token for {d['server']}."))


@command(app, "whoami")
def whoami(out: Output) -> None:
    """The token the CLI sends to --server: its name, role and limits."""
    with client_for(out) as api:
        out.emit({**api.tokens.whoami(), "server": out.server}, _render_whoami)


@command(tokens_app, "create")
def create(
    out: Output,
    name: Annotated[str, typer.Argument(help="A name for the token (who or what uses it).")],
    role: Annotated[str, typer.Option("--role", help="reader, trainer or admin.")],
    projects: Annotated[list[str] | None, typer.Option("--project", help="Limit it to this project (repeat).")] = None,
    namespaces: Annotated[list[str] | None, typer.Option("--namespace",
                                                         help="Limit it to this namespace (repeat).")] = None,
) -> None:
    """Issue a token; it is shown once, here."""
    if role not in ("reader", "trainer", "admin"):
        raise typer.BadParameter(f"{role!r} is not a role: reader, trainer or admin", param_hint="'--role'")
    with client_for(out) as api:
        out.emit(api.tokens.create(name, role=role, projects=projects, namespaces=namespaces), _render_issued)


@command(tokens_app, "list")
def list_tokens(
    out: Output,
    revoked: Annotated[bool, typer.Option("--revoked", help="Include revoked tokens.")] = False,
) -> None:
    """List tokens (never the tokens themselves: their ids, names and roles)."""
    with client_for(out) as api:
        out.emit(api.tokens.list(revoked=revoked), _render_list)


@command(tokens_app, "revoke")
def revoke(out: Output, token_id: Annotated[str, typer.Argument(help="The token's id (or a unique prefix).")]) -> None:
    """Revoke a token: it stops working at once."""
    if not token_id.strip():
        fail("name the token to revoke", "list them with: akka auth tokens list", code=2)
    with client_for(out) as api:
        out.emit(api.tokens.revoke(token_id),
                 lambda con, d: con.print(f"Revoked token {d['tokenId'][:12]} ({d['name']}, {d['role']})."))


def _limits(item) -> str:
    parts = [f"projects {', '.join(item['projects'])}" if item.get("projects") else "",
             f"namespaces {', '.join(item['namespaces'])}" if item.get("namespaces") else ""]
    return "; ".join(p for p in parts if p) or "everything"


def _render_login(con, d) -> None:
    con.print(f"Logged in to {d['server']} as {d['name']} ({d['role']}); the token is kept in {d['storedIn']}.")


def _render_whoami(con, d) -> None:
    con.print(f"{d['name']} ({d['role']}, token {d['tokenId'][:12]}) at {d['server']}; limited to: {_limits(d)}")


def _render_issued(con, d) -> None:
    con.print(f"Issued token {d['tokenId'][:12]} ({d['name']}, {d['role']}; {_limits(d)}). It is shown once:")
    con.print(d["token"], markup=False, highlight=False)


def _render_list(con, data) -> None:
    grid = table("ID", "NAME", "ROLE", "LIMITED TO", "LAST USED", "CREATED", "REVOKED")
    for item in data["tokens"]:
        grid.add_row(item["tokenId"][:12], item["name"], item["role"], _limits(item),
                     age(item["lastUsedAt"]) if item["lastUsedAt"] else DASH, age(item["createdAt"]),
                     age(item["revokedAt"]) if item["revokedAt"] else DASH)
    con.print(grid)
    con.print(footer(len(data["tokens"]), "token"))
