"""How `akka status` shows the deployment at a glance: the server, jobs by kind and phase, device pools, the
endpoints serving and the work queued for devices."""

from __future__ import annotations

from typing import Any

from optimize.cli.render import DASH, age, table


def render_status(con, data: dict[str, Any]) -> None:
    server = data["server"]
    con.print(f"[bold]Server[/]     {server['url']}: Optimize {server['version']}, store {server['database']}",
              highlight=False)
    con.print("[bold]Jobs[/]")
    grid = table("KIND", "OPEN", "TOTAL", "PHASES")
    for kind in data["jobs"]:
        open_phases = ", ".join(f"{p['phase']} {p['count']}" for p in kind["phases"] if p["open"])
        ended = ", ".join(f"{p['phase']} {p['count']}" for p in kind["phases"] if not p["open"])
        grid.add_row(kind["kind"], str(kind["open"]), str(kind["total"]),
                     " · ".join(part for part in (open_phases, ended) if part) or "none")
    con.print(grid)
    con.print("[bold]Devices[/]")
    pools = table("POOL", "PROFILE", "ACCELERATOR", "FREE", "GRANTED", "DECLARED", "QUEUED")
    for p in data["devices"]:
        pools.add_row(p["pool"], p["profile"], p["accelerator"] or p["kind"], str(p["free"]), str(p["granted"]),
                      str(p["declared"]), str(p["queued"]))
    con.print(pools)
    if data["endpoints"]:
        con.print("[bold]Endpoints[/]")
        endpoints = table("ENDPOINT", "PROJECT", "PHASE", "MODELS", "IN FLIGHT", "QUEUED")
        for e in data["endpoints"]:
            endpoints.add_row(e["endpointId"][:12], e["project"], e["phase"], ", ".join(e["models"]),
                              _count(e["inFlight"]), _count(e["queued"]))
        con.print(endpoints)
    else:
        con.print("[bold]Endpoints[/]  none serving")
    queue = data["queue"]
    if not queue["total"]:
        con.print("[bold]Queue[/]      nothing waits for devices")
        return
    con.print(f"[bold]Queue[/]      {queue['total']} waiting for devices, oldest first")
    waiting = table("KIND", "ID", "PROJECT", "NEEDS", "SINCE", "WAITING FOR")
    for job in queue["jobs"]:
        waiting.add_row(job["kind"], job["jobId"][:12], job["project"] or DASH,
                        f"{job['devices']} {job['deviceProfile']}", age(job["since"]), job["waitingFor"] or DASH)
    con.print(waiting)
    if queue["total"] > len(queue["jobs"]):
        con.print(f"… and {queue['total'] - len(queue['jobs'])} more")


def _count(value: int | None) -> str:
    return DASH if value is None else str(value)
