"""Row preparation (runs in the worker process): rows read through `optimize.chat` into what the engine trains
on, with their data fit (what was trimmed, dropped or refused)."""
