"""Distillations: a teacher model answers each decision of a chat dataset; accepted answers become a dataset."""
