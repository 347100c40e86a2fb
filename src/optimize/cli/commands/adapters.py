"""`akka registry adapters import NS/NAME -f DIR_OR_ZIP --base BASE_MODEL [--alias A]`: a PEFT LoRA adapter made
elsewhere, registered as a model version over a base model selected on this deployment."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from optimize.cli.common import client_for, command, parse_ref_argument
from optimize.cli.output import Output

app = typer.Typer(help="Adapters made elsewhere: import a PEFT LoRA adapter as a model version.",
                  no_args_is_help=True)


@command(app, "import")
def import_adapter(
    out: Output,
    model: Annotated[str, typer.Argument(help="NS/NAME to register the adapter under.")],
    path: Annotated[Path, typer.Option("-f", "--file", help="The folder PEFT's save_pretrained wrote "
                                                            "(adapter_config.json, adapter_model.safetensors), or a "
                                                            "ZIP of it.")],
    base: Annotated[str, typer.Option("--base", help="The base model it was trained on (selected here).")],
    alias: Annotated[str | None, typer.Option("--alias", help="Point this alias at the version (e.g. "
                                                              "candidate).")] = None,
) -> None:
    """Import a LoRA adapter: its shapes are checked against the base model's files, its weights digest recorded,
    its lineage `imported`; evaluate and serve it as a trained one."""
    from optimize.client.adapters import import_adapter as send

    reference = parse_ref_argument(model, "NS/NAME")
    if reference.selector != "latest":
        raise typer.BadParameter(f"import into {reference.artifact}, without a version or alias",
                                 param_hint="NS/NAME")
    with client_for(out) as api:
        version = send(api, reference, path, base=base, alias=alias)
    out.emit(version, lambda con, v: con.print(
        f"{'Imported' if v['created'] else 'Already registered:'} {v['reference']} (adapter over "
        f"{v['servingModel']['baseModel']}, rank {v['servingModel']['adapterRank']}, modules "
        f"{', '.join(v['servingModel']['modules'])})."))
