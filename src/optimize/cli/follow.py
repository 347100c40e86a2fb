"""Following a long-running item from the CLI: a line per change of its status (or each status as JSON), then
the item as `get` shows it. What ends the follow is the server's `settled`; what the exit status is, the caller
decides from the item returned."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from optimize.cli.common import fail
from optimize.cli.output import Output, console

if TYPE_CHECKING:
    from optimize.client.api import OptimizeApi


def follow_status(api: OptimizeApi, out: Output, kind: str, item_id: str, timeout: float | None,
                  line: Callable[[dict[str, Any]], str], render: Callable[[Any, dict[str, Any]], None],
                  not_yet: str = "has not ended") -> dict[str, Any]:
    """`kind` is the command group and the typed client's resource (`runs`, `evaluations`, `endpoints`)."""
    resource = {"runs": api.runs, "evaluations": api.evaluations, "endpoints": api.endpoints}[kind]
    id_key = {"runs": "runId", "evaluations": "evaluationId", "endpoints": "endpointId"}[kind]
    deadline = time.monotonic() + timeout if timeout else None
    last: dict[str, Any] | None = None
    try:
        for status in resource.follow(item_id, deadline):
            if out.is_json:
                print(json.dumps(status, separators=(",", ":")), flush=True)
            elif last is None or line(status) != line(last):
                print(line(status), flush=True)
            last = status
    except TimeoutError:
        fail(f"{kind[:-1]} {item_id} {not_yet} after {timeout:g}s; it goes on",
             f"follow it again with: akka training {kind} wait {item_id}")
    final = resource.get(last[id_key])
    if out.is_json:
        out.emit(final)
    else:
        render(console(), final)
    return final
