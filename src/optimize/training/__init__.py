"""Training, split by the process each module runs in:

- `server/` — the control plane's run lifecycle: submit, read and list runs (`runs`), pause/resume/cancel
  (`lifecycle`), how an attempt ends (`attempts`), what a run's worker reports (`reports`), completion and
  registration (`completion`), snapshots and retention, branches, capacity, the run job kind (`job`).
- `admission/` — the control plane's checks before a run claims a device: plan resolution (`resolve`), envelopes,
  default kernels, device layout, row lengths against analyses, dry-run diagnostics.
- `prep/` — the worker's row preparation: reading rows through `optimize.chat` into what the engine trains on.
- `engines/` — the worker's run loop every method shares (`harness`) and its start checks.
- `methods/` and `adapters.py` — shared by both sides: a method's admission rules (read by the server) and its
  preparation and recipe (run by the worker), imported lazily where they need torch; adapter files read without
  torch.

Worker-side modules (`prep`, `engines`, `methods`, `adapters`) never import server-side ones (`server`,
`admission`): the import contracts in pyproject.toml hold this. The run plan itself is `optimize.schemas.plans`.
"""
