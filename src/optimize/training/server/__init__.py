"""The control plane's run lifecycle (runs in the server process): runs, attempts, the worker's reports,
pause/resume/cancel, completion, snapshots and retention, branches, capacity, and the run job kind."""
