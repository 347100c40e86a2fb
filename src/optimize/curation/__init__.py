"""Curations: a judge model scores the candidates of a project's sessions against the curation's instructions, and
those scored at its threshold or more are registered as the next version of a chat dataset, with lineage."""
