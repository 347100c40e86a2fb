"""Admission (runs in the server process): everything a submission checks before a run claims a device — the plan
resolved against the catalog, registry and devices, envelopes, default kernels, layout, row lengths, diagnostics."""
