"""Measured training envelopes at admission: a run inside one is measured; a run outside every one is admitted
with a warning that it may run out of device memory (advisory catalogs, the default), or refused (strict
catalogs, `trainer.base-model-catalog.strict-envelopes: true`). The warning is kept on the run, so it stays
if the catalog changes later."""

from __future__ import annotations

from optimize.catalog.schema import Entry, Envelope
from optimize.core.errors import Refused


def _covers(envelope: Envelope, method: str, precision: str, profile: str, devices: int, on_cpu: bool,
            max_seq_length: int, adapter: str) -> bool:
    same_devices = envelope.gpus == devices or (on_cpu and envelope.gpus == 0)
    return (envelope.method == method and envelope.adapter == adapter
            and envelope.precision.lower() == precision.lower()
            and envelope.device_profile == profile and same_devices and max_seq_length <= envelope.longest_sequence)


def covering(entry: Entry, method: str, precision: str, profile: str, devices: int, on_cpu: bool,
             max_seq_length: int, adapter: str = "lora") -> Envelope | None:
    """The first measured envelope that covers the run (`adapter`: what it trains), if any."""
    return next((e for e in entry.envelopes
                 if _covers(e, method, precision, profile, devices, on_cpu, max_seq_length, adapter)), None)


def check_envelopes(entry: Entry, method: str, precision: str, profile: str, devices: int, on_cpu: bool,
                    max_seq_length: int, strict: bool, adapter: str = "lora") -> list[str]:
    """The warnings a run carries for its envelope (none when a measured envelope covers it)."""
    if covering(entry, method, precision, profile, devices, on_cpu, max_seq_length, adapter) is not None:
        return []
    unit = "slot" if on_cpu else "GPU"
    run = (f"{method}{_trained(adapter)} at {precision} on {devices} {profile} "
           f"{unit}{'s' if devices != 1 else ''} with maxSeqLength {max_seq_length}")
    measured = "; ".join(f"{e.method}{_trained(e.adapter)} {e.precision} on {e.device_profile}"
                         f"{f' x{e.gpus}' if e.gpus else ''} up to "
                         f"{e.longest_sequence} tokens" for e in entry.envelopes) or "none"
    if strict:
        raise Refused(f"no measured training envelope of {entry.id} covers {run} (measured: {measured}), and this "
                      "deployment requires one", hint="choose settings inside a measured envelope "
                      f"(akka training base-models get {entry.id}), or ask the operator to measure this one")
    return [f"unmeasured: no measured training envelope of {entry.id} covers {run} (measured: {measured}); the run "
            "may run out of device memory"]


def _trained(adapter: str) -> str:
    """How a run's or an envelope's adapter is named beside its method: nothing for the usual LoRA adapter."""
    return "" if adapter == "lora" else f" ({adapter})"
