"""Time of NCCL collectives on a process group placed on the topology (alpha-beta model).

A group of ``size`` ranks whose consecutive members are ``stride`` ranks apart stays inside a
node when ``size·stride ≤ gpus_per_node``; otherwise it crosses nodes with ``k`` members per
node, each with its own NIC, so its bus bandwidth is the smaller of the intra-node link and
``k`` NICs (NCCL runs one ring/tree channel per NIC).

Ring algorithms move ``2(n−1)/n·S`` bytes per rank for all-reduce and ``(n−1)/n·S`` for
all-gather / reduce-scatter / all-to-all; tree all-reduce moves the same bus bytes with
``2·log2(n)`` latency steps instead of ``2(n−1)``. NCCL picks the faster; so does this model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuplan.parallel.topology import INTER_LATENCY_S, INTRA_LATENCY_S, Topology


@dataclass(frozen=True, slots=True)
class Group:
    size: int
    bus_gb_per_s: float
    latency_s: float
    crosses_nodes: bool


def group(topo: Topology, size: int, stride: int) -> Group:
    """The process group of ``size`` ranks spaced ``stride`` apart."""
    intra = topo.intra_gb_per_s * topo.intra_efficiency
    if size <= 1:
        return Group(1, intra or 1.0, 0.0, False)
    if size * stride <= topo.gpus_per_node:
        return Group(size, intra, INTRA_LATENCY_S, False)
    per_node = max(1, topo.gpus_per_node // stride) if stride < topo.gpus_per_node else 1
    per_node = min(per_node, size)
    inter = per_node * topo.inter_gb_per_s * topo.inter_efficiency
    bw = min(intra, inter) if intra > 0 else inter
    return Group(size, bw, INTER_LATENCY_S, True)


def all_reduce_s(g: Group, size_bytes: float) -> float:
    n = g.size
    if n <= 1 or size_bytes <= 0:
        return 0.0
    bw_s = 2 * (n - 1) / n * size_bytes / (g.bus_gb_per_s * 1e9)
    ring = 2 * (n - 1) * g.latency_s
    tree = 2 * math.ceil(math.log2(n)) * g.latency_s
    return bw_s + min(ring, tree)


def all_gather_s(g: Group, size_bytes: float) -> float:
    """All-gather whose result is ``size_bytes`` on every rank (reduce-scatter costs the same)."""
    n = g.size
    if n <= 1 or size_bytes <= 0:
        return 0.0
    return (n - 1) / n * size_bytes / (g.bus_gb_per_s * 1e9) + (n - 1) * g.latency_s


reduce_scatter_s = all_gather_s


def all_to_all_s(g: Group, size_bytes: float) -> float:
    """All-to-all of ``size_bytes`` per rank (MoE token dispatch)."""
    return all_gather_s(g, size_bytes)


def p2p_s(g: Group, size_bytes: float) -> float:
    if size_bytes <= 0:
        return 0.0
    return size_bytes / (g.bus_gb_per_s * 1e9) + g.latency_s
