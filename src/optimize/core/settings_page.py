"""`docs/settings.md`, written from the table of settings (`core.environment`):
`python -m optimize.core.settings_page > docs/settings.md`. A unit test fails when the page and the table differ."""

from __future__ import annotations

import sys

from optimize.core.environment import CLI, SERVER, SETTINGS, WORKER, Setting, declared
from optimize.core.errors import Invalid

SECTIONS = (
    (SERVER, "The server", "Read by `akka server start` and the server process it runs."),
    (WORKER, "Workers", "Read by the worker processes the server starts for its jobs (runs, evaluations, analyses, "
                        "distillations, endpoints); they inherit the server's environment."),
    (CLI, "The CLI", "Read by `akka` commands on the machine they run on."),
)

INTRO = """\
# Settings: every `OPTIMIZE_*` environment variable

[← README](../README.md) · one of the [reference pages](../README.md#reference)

Optimize reads these environment variables, and no other `OPTIMIZE_*` one. Each has a kind, a default and the
values it allows; a secret one is masked wherever it is listed. `akka server start` checks every one of them
before it binds its port: a malformed value refuses the start with exit code 2 and one line naming the variable,
the value and what is allowed, e.g.

```
{example}
```

`akka server settings` lists them all with the value in effect in its environment (what `akka server start` would
use there), marking the ones set; `-o json` gives each as `{{name, value, set, default, type, allowed, meaning,
readBy, secret, problem}}`. A flag of `akka server start` (`--database-url`, `--blob-store`, …) wins over the
variable it names.

Kinds: `int` and `float` are numbers (bounds under *Allowed*), `bool` is one of 1, true, yes, on or 0, false, no,
off, `path` may start with `~`, `list` is items with a separator, `enum` one of the words listed, `json` a JSON
document. A variable set to nothing (or to spaces) counts as unset.
"""


HEADER = "| Variable | Kind | Default | Allowed | Meaning |\n|---|---|---|---|---|\n"
NAMED = {SERVER: "the server", WORKER: "workers", CLI: "the CLI"}


def render() -> str:
    parts = [INTRO.format(example=_refusal("OPTIMIZE_LEASE_SECONDS", "soon"))]
    for scope, title, about in SECTIONS:
        rows = [entry for entry in SETTINGS if _readers(entry)[0] == scope]
        parts.append(f"\n## {title}\n\n{about}\n\n{HEADER}")
        parts.extend(_row(entry) for entry in rows)
    return "".join(parts)


def _row(entry: Setting) -> str:
    default = f"`{entry.default}`" if entry.default is not None else entry.default_shown
    also = _readers(entry)[1:]
    meaning = entry.meaning + (f" Also read by {' and '.join(NAMED[who] for who in also)}." if also else "")
    meaning += " **Secret**: masked when listed." if entry.secret else ""
    cells = (f"`{entry.name}`", entry.kind.label, default, entry.kind.allowed(), meaning)
    return "| " + " | ".join(_cell(cell) for cell in cells) + " |\n"


def _refusal(name: str, text: str) -> str:
    """The line `akka server start` prints for `name` set to `text`."""
    try:
        declared(name).read({name: text})
    except Invalid as error:
        return f"error: {error.message} ({error.hint})"
    raise ValueError(f"{name}={text!r} is allowed: pick a malformed example")


def _readers(entry: Setting) -> list[str]:
    return entry.read_by.split(", ")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


if __name__ == "__main__":
    sys.stdout.write(render())
