"""Limits a run meets under advisory and strict envelopes alike: the device profile must exist here, the run may
not ask for more devices than the deployment has, the engine must train the method on that many devices, and
the measured host memory of the run's envelope must fit this node.

These refuse at submission (and in a dry run); the scheduler still fails queued work that a restart with other
devices can no longer hold.
"""

from __future__ import annotations

import os

from optimize.catalog.schema import Entry
from optimize.core.errors import Refused
from optimize.jobs.devices import DeviceProfile
from optimize.training.admission.envelopes import covering
from optimize.training.methods import declared


def host_memory_gib() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def check_layout(entry: Entry, method: str, precision: str, profile_name: str, devices: int,
                 max_seq_length: int, profiles: list[DeviceProfile], node_memory_gib: float | None = None) -> None:
    """Refuse a run this deployment can never train, naming the limit and what to change."""
    have = ", ".join(f"{p.name} ({p.devices} device{'s' if p.devices != 1 else ''})" for p in profiles) or "none"
    profile = next((p for p in profiles if p.name == profile_name), None)
    if profile is None:
        raise Refused(f"execution.deviceProfile {profile_name!r} is not a device profile of this deployment; "
                      f"profiles here: {have}", hint="set execution.deviceProfile to one of them")
    if devices > profile.devices:
        raise Refused(f"execution.gpus {devices} asks for more devices of profile {profile_name!r} than this "
                      f"deployment has ({have})", hint=f"set execution.gpus to {profile.devices} or fewer")
    # each method names its engine and the devices it trains one run on: TRL's supervised and preference trainers
    # run data-parallel on the devices of one node (a rank each); reinforcement runs train on one
    declaration = declared(method)
    engine, most = declaration.engine, declaration.devices
    if devices > most:
        raise Refused(f"the {engine} engine trains {method} runs on {most} device; execution.gpus {devices} needs "
                      "an engine this deployment does not have", hint=f"set execution.gpus: {most}")
    envelope = covering(entry, method, precision, profile_name, devices, profile.kind == "cpu", max_seq_length)
    node = host_memory_gib() if node_memory_gib is None else node_memory_gib
    if envelope is not None and envelope.host_memory_gib > node:
        raise Refused(f"the measured envelope of {entry.id} for this run peaks at {envelope.host_memory_gib:g} GiB of "
                      f"host memory; this node has {node:.1f} GiB",
                      hint="train on a node with more memory, or choose a smaller base model")
