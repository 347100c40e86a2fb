"""The kernel's registry of kinds is the one place a kind is named: every entry resolves to its declaration,
worker entry, routers and command groups, and the server and CLI mount exactly what it names."""

from __future__ import annotations

import typer
from fastapi import APIRouter

from optimize.jobs import registry
from optimize.jobs.kinds import JobKind


def test_every_entry_resolves_to_what_it_names():
    for name, entry in registry.KINDS.items():
        kind = registry.kind(name)
        assert isinstance(kind, JobKind) and kind.name == name
        assert callable(registry.worker_entry(name))
        assert entry.routers and entry.commands, f"{name}: a kind is reachable through the API and the CLI"
    assert all(isinstance(router, APIRouter) for router in registry.routers())
    assert all(isinstance(app, typer.Typer) for _command, app in registry.commands())


def test_the_cli_mounts_every_group_the_registry_names():
    from optimize.cli.commands.training import app

    mounted = {group.name: group.typer_instance for group in app.registered_groups}
    for command, commands in registry.commands():
        assert mounted.get(command.name) is commands, f"akka training {command.name} is not mounted"


def test_the_server_mounts_every_router_the_registry_names(tmp_path):
    from optimize.api.app import create_app
    from optimize.core.settings import ServerSettings

    served = set(create_app(ServerSettings(data_dir=tmp_path, detect_gpus=False)).openapi()["paths"])
    for router in registry.routers():
        named = {route.path for route in router.routes if getattr(route, "include_in_schema", False)}
        assert named and named <= served


def test_project_work_is_what_an_archive_waits_for():
    assert [kind.name for kind in registry.kinds() if kind.project_work] == ["run", "evaluation", "distillation",
                                                                             "endpoint"]
