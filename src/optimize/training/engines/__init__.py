"""Training engines (run in the worker process): `harness`, the run loop every method shares (prepared rows in,
saves and metrics out), which trains with each method's TRL recipe from `training.methods`; `checks`, the
reference check before the first update."""
