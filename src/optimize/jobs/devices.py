"""Devices and pools, what the kernel's scheduler grants from: a device profile (declared in the applied
catalog's `devices:`, or found here), the inventory (declared profiles, GPUs detected with nvidia-smi, and a `cpu`
profile so that every kind of work can run on a machine without GPUs), and the device slots of each pool.

Detection never imports torch (the server stays light); it asks `nvidia-smi`, and finds nothing when absent.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class DeviceProfile(BaseModel):
    """One profile of devices (the catalog file's `devices:` entries are these; unknown fields are refused)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = Field(description="Profile name used by execution.deviceProfile, e.g. cpu or h200")
    kind: Literal["cpu", "gpu"]
    devices: int = Field(ge=0, description="Devices of this profile on this deployment (cpu: concurrent job slots)")
    pool: str = Field(default="training", description="Pool the devices belong to")
    accelerator: str | None = Field(default=None, description="Accelerator model, e.g. NVIDIA H200")
    memory_gib: float | None = Field(default=None, alias="memoryGiB", description="Memory per device, GiB")


@dataclass(frozen=True, slots=True)
class Device:
    profile: str
    index: int
    pool: str
    accelerator: str | None
    memory_gib: float | None

    @property
    def device_id(self) -> str:
        return f"{self.profile}:{SERVING}:{self.index}" if self.pool == SERVING else f"{self.profile}:{self.index}"


def detect_gpus() -> list[DeviceProfile]:
    """GPU profiles found by nvidia-smi: one profile per model name (e.g. `h200`)."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        output = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
                                capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    found: dict[str, DeviceProfile] = {}
    for line in output.strip().splitlines():
        name, _, memory = (part.strip() for part in line.partition(","))
        profile = _profile_name(name)
        current = found.get(profile)
        found[profile] = DeviceProfile(name=profile, kind="gpu", devices=(current.devices if current else 0) + 1,
                                       accelerator=name, memoryGiB=round(float(memory) / 1024, 1) if memory else None)
    return list(found.values())


def _profile_name(gpu_name: str) -> str:
    words = gpu_name.replace("NVIDIA", "").split()
    for word in words:
        if any(ch.isdigit() for ch in word):
            return word.lower()
    return (words[0] if words else "gpu").lower()


def inventory(declared: list[DeviceProfile], detect: bool = True) -> list[DeviceProfile]:
    """Declared profiles win over detected ones of the same name; a `cpu` profile is always present."""
    profiles = {profile.name: profile for profile in (detect_gpus() if detect else [])}
    profiles.update({profile.name: profile for profile in declared})
    profiles.setdefault("cpu", DeviceProfile(name="cpu", kind="cpu", devices=1, accelerator=None))
    return sorted(profiles.values(), key=lambda p: (p.kind != "gpu", p.name))


SERVING = "serving"


def devices(profiles: list[DeviceProfile]) -> list[Device]:
    """Every device slot: a profile's devices, and on a cpu profile as many slots again kept for serving, so a
    resident endpoint never takes the slot that runs and evaluations train and answer on."""
    found = [Device(p.name, index, p.pool, p.accelerator, p.memory_gib) for p in profiles for index in range(p.devices)]
    found += [Device(p.name, index, SERVING, None, None) for p in profiles if p.kind == "cpu"
              for index in range(p.devices)]
    return found


def pool_devices(profile: DeviceProfile, pool: str) -> list[str]:
    """The device ids a job drawing on `pool` may be granted on this profile: GPUs are shared by every pool;
    a cpu profile keeps separate slots for serving."""
    serving = pool == SERVING and profile.kind == "cpu"
    return [d.device_id for d in devices([profile]) if (d.pool == SERVING) == serving]
