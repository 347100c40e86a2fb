"""Training: run plans (and, with later features, runs, phases, snapshots)."""
