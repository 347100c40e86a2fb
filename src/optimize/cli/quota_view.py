"""How the CLI shows per-project quotas: each project's use against its quota (`training capacity`) and the
deployment's quota settings (`registry info`)."""

from __future__ import annotations

from typing import Any

from optimize.cli.render import table
from optimize.core.sizes import human_size


def render_quotas(con, projects: list[dict[str, Any]]) -> None:
    """The Training projects table: USED/QUOTA for each quota."""
    if not projects:
        con.print("[bold]Training projects[/]  none")
        return
    con.print("[bold]Training projects[/] (used/quota)")
    grid = table("PROJECT", "OPEN RUNS", "QUEUED", "UPLOADS", "STORED")
    for row in projects:
        used, quota = row["used"], row["quota"]
        grid.add_row(row["project"], f"{used['openRuns']}/{quota['openRuns']}",
                     f"{used['queuedWork']}/{quota['queuedWork']}",
                     f"{used['uploadSessions']}/{quota['uploadSessions']}",
                     f"{human_size(used['storedBytes'])}/{human_size(quota['storedBytes'])}")
    con.print(grid)


def quota_line(quota: dict[str, int]) -> str:
    return (f"{quota['openRuns']} open runs, {quota['queuedWork']} queued, {quota['uploadSessions']} upload sessions, "
            f"{human_size(quota['storedBytes'])} stored")


def render_quota_settings(con, quotas: dict[str, Any]) -> None:
    con.print(f"  Quotas        per project: {quota_line(quotas['default'])}")
    for name, quota in sorted(quotas["projects"].items()):
        con.print(f"                {name}: {quota_line(quota)}")
