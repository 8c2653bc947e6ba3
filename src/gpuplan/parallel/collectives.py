"""Process groups placed on the cluster topology; their collective times come from the one
communication model, :mod:`gpuplan.perf.collectives` (re-exported here for the planner).

A group of ``size`` ranks whose consecutive members are ``stride`` ranks apart stays inside a
node when ``size·stride ≤ gpus_per_node``; otherwise it crosses nodes with ``k`` members per
node, each with its own NIC, so its bus bandwidth is the smaller of the intra-node link and
``k`` NICs (NCCL runs one ring/tree channel per NIC).
"""

from __future__ import annotations

from gpuplan.parallel.topology import Topology
from gpuplan.perf.collectives import (
    INTER_LATENCY_S,
    Group,
    all_gather_s,
    all_reduce_s,
    all_to_all_s,
    intra_node_group,
    p2p_s,
    reduce_scatter_s,
)

__all__ = ["Group", "all_gather_s", "all_reduce_s", "all_to_all_s", "group", "p2p_s", "reduce_scatter_s"]


def group(topo: Topology, size: int, stride: int) -> Group:
    """The process group of ``size`` ranks spaced ``stride`` apart."""
    if size <= 1 or size * stride <= topo.gpus_per_node:
        return intra_node_group(size, topo.intra_gb_per_s, topo.intra_efficiency)
    intra = topo.intra_gb_per_s * topo.intra_efficiency
    per_node = max(1, topo.gpus_per_node // stride) if stride < topo.gpus_per_node else 1
    per_node = min(per_node, size)
    inter = per_node * topo.inter_gb_per_s * topo.inter_efficiency
    bw = min(intra, inter) if intra > 0 else inter
    return Group(size, bw, INTER_LATENCY_S, True)
