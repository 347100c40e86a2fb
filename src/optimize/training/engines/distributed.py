"""Data-parallel training over the devices of one grant: one process per device (a rank), all on one node, joined
by torch.distributed (gloo on the cpu, NCCL on GPUs) through accelerate, which TRL's trainers use as they are.

Rank 0 is the job's worker: it reports, uploads the saves and decides. The other ranks follow: at every update
they take rank 0's decision to stop or pause (`agreed`), so all ranks stop at the same update boundary; a save is
reported once every rank has written its part (its random state) into the checkpoint (`barrier`).

With `execution.sharding: fsdp` the ranks shard the model (FSDP2, `FSDP_CONFIG`) instead of each holding a whole
copy. accelerate runs cpu ranks as MULTI_CPU and drops its FSDP plugin there, though torch's FSDP2 runs on gloo:
`shard_on_cpu` gives the plugin back to a trainer on the cpu, so a cpu profile with several slots shards as GPUs do.
"""

from __future__ import annotations

import os
import socket
from typing import Any

# FSDP2 with each decoder layer a unit (accelerate takes the layers from the model's `_no_split_modules`); saves
# gather the whole adapter (FULL_STATE_DICT), so a save is an adapter like any other run's
FSDP_CONFIG = {"version": 2, "auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "state_dict_type": "FULL_STATE_DICT",
               "reshard_after_forward": True}


def world() -> tuple[int, int]:
    """(this process's rank, how many ranks) from the launch environment; (0, 1) on one device."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def local_device() -> int:
    """The index of this rank's device among the devices its node gives the job."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def environment(rank: int, size: int, port: int) -> dict[str, str]:
    """What a rank is started with (torch.distributed's env:// rendezvous on this node)."""
    return {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(size), "LOCAL_WORLD_SIZE": str(size),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _joined() -> bool:
    import torch.distributed as dist

    return world()[1] > 1 and dist.is_available() and dist.is_initialized()


def agreed(value: Any) -> Any:
    """Rank 0's `value`, on every rank (a collective: every rank calls it at the same point)."""
    if not _joined():
        return value
    import torch.distributed as dist

    held = [value]
    dist.broadcast_object_list(held, src=0)
    return held[0]


def barrier() -> None:
    if _joined():
        import torch.distributed as dist

        dist.barrier()


def shard_on_cpu(trainer: Any) -> None:
    """Give a cpu trainer the FSDP plugin accelerate dropped (before it prepares the model, in `train`)."""
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

    state = trainer.accelerator.state
    if state.distributed_type != DistributedType.MULTI_CPU or not trainer.args.fsdp_plugin_args:
        return
    state.fsdp_plugin = FullyShardedDataParallelPlugin(**trainer.args.fsdp_plugin_args)
    state.distributed_type = DistributedType.FSDP
    PartialState._shared_state["distributed_type"] = DistributedType.FSDP
    trainer.is_fsdp_enabled = True


def sharded_units(model: Any, ranks: int) -> str:
    """What the worker's log says of a sharded model once accelerate has prepared it."""
    from torch.distributed.fsdp import FSDPModule

    units = sum(isinstance(module, FSDPModule) for module in model.modules())
    return f"sharding: fsdp, {units} FSDP units over {ranks} devices"
