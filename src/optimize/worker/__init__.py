"""Job workers: one process per job attempt, talking to the control plane only over HTTP."""
