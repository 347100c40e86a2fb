"""The job kinds are named in three tables at the top, one per process — the API's (`api.kinds`: declarations
and routers), the CLI's (`cli.kinds`: `akka training` groups) and the worker's (`worker.kinds`: entries) — and
the kernel knows a kind only once the server registers its declaration. Every declared kind has its routers, its
command groups, its worker entry and a follower's reader, and each process mounts exactly what its table names."""

from __future__ import annotations

import subprocess
import sys

import typer
from fastapi import APIRouter

from optimize.api.kinds import SERVED, kind_routers, register_kinds
from optimize.cli.kinds import GROUPS, groups
from optimize.cli.progress import FOLLOWED
from optimize.jobs import registry
from optimize.jobs.kinds import JobKind
from optimize.worker.kinds import ENTRIES

DECLARED = [served.declaration.name for served in SERVED]


def test_every_declared_kind_has_its_routers_command_groups_worker_entry_and_reader():
    assert DECLARED == ["run", "analysis", "evaluation", "distillation", "curation", "endpoint", "comparison",
                        "pipeline"]
    for served in SERVED:
        assert isinstance(served.declaration, JobKind)
        assert served.routers and all(isinstance(router, APIRouter) for router in served.routers)
    assert list(GROUPS) == DECLARED, "every kind is driven by `akka training` groups, in the API's order"
    assert all(GROUPS[name] and all(isinstance(g.commands, typer.Typer) for g in GROUPS[name]) for name in DECLARED)
    with_workers = {served.declaration.name for served in SERVED if served.declaration.worker}
    assert with_workers == set(DECLARED) - {"comparison", "pipeline"}, "comparisons and pipelines are the server's"
    assert set(ENTRIES) == with_workers and all(callable(entry.run) for entry in ENTRIES.values())
    assert sorted(followed.item for followed in FOLLOWED.values()) == sorted(DECLARED)


def test_replicas_start_only_for_the_kinds_whose_jobs_span_devices():
    assert {name for name, entry in ENTRIES.items() if entry.replica is not None} == {"run", "distillation"}


def test_the_kernel_knows_the_kinds_the_server_registers_in_the_order_of_its_table():
    register_kinds()
    register_kinds()  # every app created registers them again: nothing changes
    assert [kind.name for kind in registry.kinds()][:len(DECLARED)] == DECLARED
    assert all(registry.kind(served.declaration.name) is served.declaration for served in SERVED)


def test_another_declaration_under_a_registered_name_is_refused():
    class Impostor(type(SERVED[0].declaration)):
        pass

    register_kinds()
    try:
        registry.register(Impostor())
    except ValueError as refused:
        assert "job kind 'run' is already registered as RunKind" in str(refused)
    else:
        raise AssertionError("a second declaration of run was accepted")
    assert registry.kind("run") is SERVED[0].declaration


def test_the_cli_mounts_every_group_its_table_names():
    from optimize.cli.commands.training import app

    mounted = {group.name: (group.typer_instance, group.hidden) for group in app.registered_groups}
    for group in groups():
        assert mounted.get(group.name) == (group.commands, group.hidden), f"akka training {group.name} is not mounted"


def test_the_server_mounts_every_router_its_table_names(tmp_path):
    from optimize.api.app import create_app
    from optimize.core.settings import ServerSettings

    served = set(create_app(ServerSettings(data_dir=tmp_path, detect_gpus=False)).openapi()["paths"])
    for router in kind_routers():
        named = {route.path for route in router.routes if getattr(route, "include_in_schema", False)}
        assert named and named <= served


def test_project_work_is_what_an_archive_waits_for():
    register_kinds()
    assert [kind.name for kind in registry.kinds() if kind.project_work] == ["run", "evaluation", "distillation",
                                                                             "curation", "endpoint", "comparison",
                                                                             "pipeline"]


def test_a_worker_imports_only_the_kind_it_runs():
    """`python -m optimize.worker` reads its table without importing any kind's worker module, the kernel or the
    server's services; an entry imports its own kind's module when it runs."""
    probe = ("import sys, optimize.worker.__main__ as main; from optimize.worker.kinds import ENTRIES; "
             "loaded = [m for m in sys.modules if m.startswith(('optimize.worker.run', 'optimize.worker.analysis', "
             "'optimize.worker.evaluation', 'optimize.worker.endpoint', 'optimize.worker.distillation', "
             "'optimize.worker.curation', "
             "'optimize.jobs', 'optimize.api', 'optimize.training', 'torch'))]; print(sorted(loaded))")
    shown = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert shown.strip() == "[]"


def test_a_worker_refuses_a_kind_no_table_names_and_replicas_of_a_kind_without_them():
    refused = subprocess.run([sys.executable, "-m", "optimize.worker", "sweep", "x", "--server", "http://127.0.0.1:1"],
                             capture_output=True, text=True)
    assert refused.returncode == 2 and "invalid choice: 'sweep'" in refused.stderr
    replica = subprocess.run([sys.executable, "-m", "optimize.worker", "analysis", "x", "--server",
                              "http://127.0.0.1:1", "--replica", "1"], capture_output=True, text=True)
    assert replica.returncode == 2 and "a analysis worker starts no replicas" in replica.stderr
