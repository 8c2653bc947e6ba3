"""Weight sync: the trained policy's weights into the rollout engine after each step, timed by the one
collectives model (``perf.collectives`` through ``parallel.collectives.group``).

Colocated (verl's hybrid engine, TRL ``vllm_mode="colocate"``): the FSDP shards are all-gathered over the
trainer GPUs (16-bit) and loaded into the woken engine on the same GPU (a device copy, not counted).
Split (OpenRLHF, verl's split placement): the trainer gathers them the same way, then its rank 0 broadcasts
them to the engine ranks over NCCL, one hop from the trainer GPUs to the rollout GPUs (one link's bandwidth).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuplan.parallel.collectives import all_gather_s, group, p2p_s

if TYPE_CHECKING:
    from gpuplan.parallel.topology import Topology
    from gpuplan.rl.settings import RLSettings


def weight_sync_s(settings: RLSettings, weight_bytes: int, topology: Topology) -> float:
    """Seconds of one sync of ``weight_bytes`` (the policy in 16 bits) on the whole cluster ``topology``
    (trainer GPUs first, then the rollout GPUs when split)."""
    gather = all_gather_s(group(topology, settings.trainer_gpus, 1), weight_bytes)
    if settings.placement == "colocate":
        return gather
    return gather + p2p_s(group(topology, 2, settings.trainer_gpus), weight_bytes)
