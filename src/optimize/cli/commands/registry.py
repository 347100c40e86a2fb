"""`akka registry info` and the registry's sub-groups."""

from __future__ import annotations

import typer

from optimize.cli.commands import adapters, bundles, datasets, models, namespaces
from optimize.cli.common import client_for, command
from optimize.cli.output import Output
from optimize.cli.quota_view import render_quota_settings
from optimize.core.sizes import human_size

app = typer.Typer(help="The artifact registry: namespaces, datasets, models (and adapters made elsewhere) and "
                       "bundles.", no_args_is_help=True)
app.add_typer(namespaces.app, name="namespaces")
app.add_typer(datasets.app, name="datasets")
app.add_typer(models.app, name="models")
app.add_typer(bundles.app, name="bundles")
app.add_typer(adapters.app, name="adapters")


@command(app, "info")
def info(out: Output) -> None:
    """Show the registry's limits (shard size and count, upload expiry, line length) and the per-project quotas."""
    with client_for(out) as api:
        out.emit(api.registry_info(), _render_info)


def _render_info(con, data) -> None:
    limits = data["datasets"]
    con.print(f"[bold]Registry[/] (Optimize {data['version']})")
    con.print(f"  Datasets      formats {', '.join(limits['formats'])}")
    con.print(f"  Shards        at most {limits['maxShards']} a version, {human_size(limits['maxShardBytes'])} each")
    con.print(f"  Lines         at most {human_size(limits['maxLineBytes'])}")
    con.print(f"  Uploads       resumable for {limits['uploadExpirySeconds'] // 3600}h")
    if data.get("blobs"):  # a server before S3 stores does not say
        con.print(f"  Blobs         {data['blobs']}")
    if "quotas" in data:  # a server before quotas does not say
        render_quota_settings(con, data["quotas"])
