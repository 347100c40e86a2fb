"""Pipelines: ordered stages (train, evaluate, distill), each a job of its own kind, later ones naming earlier
outputs as `@STAGE`."""
