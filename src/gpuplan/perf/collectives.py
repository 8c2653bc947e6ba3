"""Time of NCCL collectives on a process group (alpha-beta model): the one communication model of
gpuplan, used by the planner (``gpuplan.parallel``: groups placed on a cluster topology) and by the
tensor-parallel calibration rows (``gpuplan.perf.calibration``).

Ring algorithms move ``2(n−1)/n·S`` bytes per rank for all-reduce and ``(n−1)/n·S`` for
all-gather / reduce-scatter / all-to-all; tree all-reduce moves the same bus bytes with
``2·log2(n)`` latency steps instead of ``2(n−1)``. NCCL picks the faster; so does this model.

Bus-bandwidth efficiency (NCCL busbw ÷ link rate) is an assumption, stated with every result:
0.80 inside a node and 0.85 across nodes. What it rests on (nccl-tests all_reduce_perf, large
messages): 8×A100-SXM4 over NVSwitch reach busbw 200–208 GB/s of 300 GB/s per direction
(NVIDIA/nccl-tests issues #149, #178: 0.67–0.69), a cluster vendor's reference table gives
230–250 GB/s for 8×A100 and 460–480 GB/s for 8×H100 SXM (NVLink SHARP; docs.alayanew.com
"NCCL-tests in practice", 2026); 3 nodes of 8×A100 with 4 HDR NICs reach 85–96 GB/s of the
100 GB/s the NICs allow (NVIDIA/nccl-tests #119: 0.85–0.96). Not fitted here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

INTRA_EFFICIENCY = 0.80
"""NCCL bus bandwidth ÷ link rate inside a node (NVLink / PCIe)."""
INTER_EFFICIENCY = 0.85
"""NCCL bus bandwidth ÷ NIC rate between nodes."""
INTRA_LATENCY_S = 5e-6
INTER_LATENCY_S = 10e-6


@dataclass(frozen=True, slots=True)
class Group:
    size: int
    bus_gb_per_s: float
    latency_s: float
    crosses_nodes: bool


def intra_node_group(size: int, link_gb_per_s: float, efficiency: float = INTRA_EFFICIENCY) -> Group:
    """``size`` ranks inside one node whose GPUs talk over a link of ``link_gb_per_s`` per direction."""
    bus = link_gb_per_s * efficiency
    if size <= 1:
        return Group(1, bus or 1.0, 0.0, False)
    return Group(size, bus, INTRA_LATENCY_S, False)


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
