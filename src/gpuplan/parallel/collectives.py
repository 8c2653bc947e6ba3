"""Process groups placed on the cluster topology; their collective times come from the one
communication model, :mod:`gpuplan.perf.collectives` (re-exported here for the planner).

A group of ``size`` ranks whose consecutive members are ``stride`` ranks apart stays inside a
node when ``size·stride ≤ gpus_per_node``; otherwise it crosses nodes with ``k`` members per
node, each with its own NIC, so its bus bandwidth is the smaller of the intra-node link and
``k`` NICs (NCCL runs one ring/tree channel per NIC).
"""

from __future__ import annotations

from functools import lru_cache

from gpuplan.parallel.topology import Topology
from gpuplan.perf.collectives import (
    Group,
    all_gather_s,
    all_reduce_s,
    all_to_all_s,
    intra_node_group,
    p2p_s,
    reduce_scatter_s,
)

__all__ = ["Group", "all_gather_s", "all_reduce_s", "all_to_all_s", "group", "p2p_s", "reduce_scatter_s"]


@lru_cache(maxsize=4096)  # a search places the same few groups thousands of times
def group(topo: Topology, size: int, stride: int) -> Group:
    """The process group of ``size`` ranks spaced ``stride`` apart."""
    link = "pcie" if topo.intra_link == "pcie" else "nvlink"
    intra = topo.intra_gb_per_s * topo.intra_efficiency
    if size <= 1 or size * stride <= topo.gpus_per_node:
        return intra_node_group(size, topo.intra_gb_per_s, topo.intra_efficiency, link)
    per_node = max(1, topo.gpus_per_node // stride) if stride < topo.gpus_per_node else 1
    per_node = min(per_node, size)
    nic = topo.inter_gb_per_s * topo.inter_efficiency
    inter = per_node * nic
    bw = min(intra, inter) if intra > 0 else inter
    return Group(size, bw, -(-size // per_node), link, nic_gb_per_s=nic, link_gb_per_s=intra or bw)
