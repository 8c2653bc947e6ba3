"""A forward-only step (inference, a frozen reference's log-probabilities) with its weights sharded over n
GPUs (FSDP / ZeRO-3 as they run a model without gradients): the one rule, used by ``recommend`` (its
sharded inference figures) and ``gpuplan.rl`` (the reference, reward and old-policy forwards).

Each GPU holds 1/n of the weights and gathers them block by block, one block ahead (the current block and
the prefetched next one unsharded); everything else is the single-GPU step. Every forward (the prompt, then
each generated token) gathers the whole model once; the gathers are prefetched, so they hide behind compute
up to the single-GPU time (the caller takes the larger of the two).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuplan.parallel.collectives import all_gather_s, group

if TYPE_CHECKING:
    from gpuplan.parallel.topology import Topology
    from gpuplan.trace.step import TracedStep


@dataclass(frozen=True, slots=True)
class ShardedForward:
    """One GPU's share of a forward-only step sharded over ``gpus``."""

    gpus: int
    bytes_per_gpu: int
    """Reserved bytes of the step on one GPU (before the CUDA context and workspaces)."""
    weight_bytes_per_gpu: int
    """The weights' shard each GPU keeps between forwards."""
    gather_s: float
    """Seconds of all-gathers of one step (prefetched: overlapped with compute)."""


def sharded_forward(
    step: TracedStep, topology: Topology, gpus: int, *, forwards: int = 1, held_bytes_per_gpu: int | None = None
) -> ShardedForward:
    """``step`` (traced on one GPU) with its weights sharded over ``gpus`` of ``topology``; ``forwards``:
    the passes over the model in the step (generation: one per token). One GPU: the step as traced.

    ``held_bytes_per_gpu``: the weights a trainer keeps on each GPU between its forwards when they are not the
    traced compute copy — FSDP mixed precision (``param_dtype`` bf16) holds fp32 shards and gathers each block in
    bf16; ZeRO-3 with parameter offload holds none — so the step is the traced forward's (in the compute dtype)
    with that shard and two gathered blocks in place of its whole weights, on one GPU too."""
    single = step.min_reserved_bytes or step.reserved_peak_bytes
    if gpus <= 1 and held_bytes_per_gpu is None:
        return ShardedForward(1, single, step.param_bytes, 0.0)
    layers = sum(step.block_counts.values()) or sum(step.traced_blocks.values()) or 1
    gathered = 2 * step.param_bytes // layers  # current block + the prefetched next one
    shard = -(-step.param_bytes // gpus) if held_bytes_per_gpu is None else held_bytes_per_gpu
    gather_s = forwards * all_gather_s(group(topology, gpus, 1), step.param_bytes) if gpus > 1 else 0.0
    return ShardedForward(gpus, single - step.param_bytes + shard + gathered, shard, gather_s)
