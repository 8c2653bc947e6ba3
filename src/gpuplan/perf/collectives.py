"""Time of NCCL collectives on a process group: the one communication model of gpuplan, used by
the planner (``gpuplan.parallel``: groups placed on a cluster topology), by ``recommend`` and by
the tensor-parallel calibration rows (``gpuplan.perf.calibration``).

Each collective costs ``α + n/β`` for every algorithm and protocol NCCL could run, and the cheapest
is taken, as NCCL's tuner does (NVIDIA/nccl ``src/graph/tuning.cc``, ``ncclTopoTuneModel`` and
``ncclTopoGetAlgoTime``: time = latency + bytes / algorithm bandwidth):

* ring (every collective): ``2(n−1)`` steps for all-reduce and ``n−1`` for all-gather /
  reduce-scatter, each step one hop of the intra-node link or, where the ring crosses a node
  boundary, of the network; bus bytes ``2(n−1)/n·S`` and ``(n−1)/n·S``;
* tree (all-reduce only): a chain inside each node and a double binary tree across nodes,
  latency ``2·((ppn−1)·intra hop + log2(nodes)·net hop)``, the same bus bytes at 0.92 of the
  ring's bus bandwidth;
* protocols LL (low latency, a quarter of the bandwidth for all-reduce or across nodes, a third
  inside a node), LL128 (NVLink only, 0.92 of the bandwidth) and Simple (full bandwidth, the
  largest per-hop latency). Small messages therefore run latency-bound on LL, large ones on Simple.

Latencies (µs) are NCCL's own model constants (tuning.cc ``baseLat`` and ``hwLat``, NCCL 2.18+):
base 6.6 / 14.0 / 8.4 (ring LL / LL128 / Simple), 6.8 / 14.0 / 0 (tree); per hop NVLink 0.6 / 1.9 /
3.4, PCIe 1.0 / 2.5 / 5.7, network 2.7 / 4.0 / 14.0 (ring), tree per hop NVLink 0.6 / 1.25 / 28,
network 5.0 / 8.5 / 28.

All-to-all (MoE token dispatch and combine) is NCCL's grouped point-to-point: each rank sends
``S/n`` to every other rank at once, the intra-node part over the link and the rest through the
rank's own NIC, concurrently; its latency is one Simple hop on each path plus the network post
overhead (1 µs per peer on x86, tuning.cc ``getNetOverhead``).

Bus-bandwidth efficiency (NCCL busbw ÷ link rate, large messages) is an assumption, stated with
every result: 0.80 inside a node and 0.85 across nodes. What it rests on (nccl-tests
all_reduce_perf): 8×A100-SXM4 over NVSwitch reach busbw 200–208 GB/s of 300 GB/s per direction
(NVIDIA/nccl-tests issues #149, #178: 0.67–0.69), a cluster vendor's reference table gives
230–250 GB/s for 8×A100 and 460–480 GB/s for 8×H100 SXM (NVLink SHARP; docs.alayanew.com
"NCCL-tests in practice", 2026); 3 nodes of 8×A100 with 4 HDR NICs reach 85–96 GB/s of the
100 GB/s the NICs allow (NVIDIA/nccl-tests #119: 0.85–0.96). Not fitted here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

INTRA_EFFICIENCY = 0.80
"""NCCL bus bandwidth ÷ link rate inside a node (NVLink / PCIe)."""
INTER_EFFICIENCY = 0.85
"""NCCL bus bandwidth ÷ NIC rate between nodes."""

_US = 1e-6
# NCCL tuning.cc: (base, NVLink hop, PCIe hop, network hop) in µs per protocol, ring and tree.
_RING_LAT_US = {"LL": (6.6, 0.6, 1.0, 2.7), "LL128": (14.0, 1.9, 2.5, 4.0), "Simple": (8.4, 3.4, 5.7, 14.0)}
_TREE_LAT_US = {"LL": (6.8, 0.6, 1.0, 5.0), "LL128": (14.0, 1.25, 1.9, 8.5), "Simple": (0.0, 28.0, 28.0, 28.0)}
_NET_POST_US = 1.0
"""NCCL's network post overhead per send on x86 (tuning.cc getNetOverhead)."""
_TREE_BW = 0.92
"""Tree bus bandwidth ÷ ring bus bandwidth (tuning.cc: ``busBw * .92``)."""

INTRA_LATENCY_S = _RING_LAT_US["Simple"][1] * _US
"""One NVLink hop of a Simple-protocol ring (NCCL's model)."""
INTER_LATENCY_S = _RING_LAT_US["Simple"][3] * _US
"""One network hop of a Simple-protocol ring (NCCL's model)."""


@dataclass(frozen=True, slots=True)
class Group:
    """A process group of ``size`` ranks spread evenly over ``nodes`` nodes."""

    size: int
    bus_gb_per_s: float
    """Ring bus bandwidth per rank (GB/s): the link's inside a node, the NICs' across nodes."""
    nodes: int = 1
    link: str = "nvlink"
    """The link between GPUs of one node: ``nvlink`` or ``pcie``."""
    nic_gb_per_s: float = 0.0
    """Network bandwidth of one rank's own NIC (× efficiency), for point-to-point traffic."""
    link_gb_per_s: float = 0.0
    """Intra-node bus bandwidth per rank (× efficiency); ``bus_gb_per_s`` when 0."""

    @property
    def crosses_nodes(self) -> bool:
        return self.nodes > 1

    @property
    def ranks_per_node(self) -> int:
        return max(1, self.size // max(self.nodes, 1))

    @property
    def latency_s(self) -> float:
        """One Simple-protocol hop of the slowest link the group uses (point-to-point latency)."""
        return self._hop_s("Simple", _RING_LAT_US) if self.size > 1 else 0.0

    def _hop_s(self, proto: str, table: dict[str, tuple[float, float, float, float]]) -> float:
        _, nvl, pci, net = table[proto]
        return (net if self.crosses_nodes else (nvl if self.link == "nvlink" else pci)) * _US

    def _intra_hop_s(self, proto: str, table: dict[str, tuple[float, float, float, float]]) -> float:
        _, nvl, pci, _ = table[proto]
        return (nvl if self.link == "nvlink" else pci) * _US


def intra_node_group(
    size: int, link_gb_per_s: float, efficiency: float = INTRA_EFFICIENCY, link: str = "nvlink"
) -> Group:
    """``size`` ranks inside one node whose GPUs talk over a link of ``link_gb_per_s`` per direction."""
    bus = link_gb_per_s * efficiency
    return Group(max(size, 1), bus or 1.0, 1, link)


def _protocols(g: Group) -> tuple[str, ...]:
    # NCCL enables LL128 by default only where every hop inside a node is NVLink.
    return ("LL", "LL128", "Simple") if g.link == "nvlink" else ("LL", "Simple")


def _proto_bw(g: Group, proto: str, all_reduce: bool) -> float:
    """Bus bandwidth (bytes/s) of a ring on ``proto`` (tuning.cc "model refinements")."""
    bus = g.bus_gb_per_s * 1e9
    if proto == "LL":
        return bus / (4 if (all_reduce or g.crosses_nodes) else 3)
    if proto == "LL128":
        return bus * 0.92
    return bus


def _ring_s(g: Group, bus_bytes: float, steps: int, inter_steps: int, proto: str, all_reduce: bool) -> float:
    base = _RING_LAT_US[proto][0] * _US
    intra = g._intra_hop_s(proto, _RING_LAT_US)
    if g.crosses_nodes:
        # rings crossing nodes still post every step to the network proxy (tuning.cc)
        intra = max(intra, _NET_POST_US * _US * (3 if proto == "Simple" else 1))
    net = _RING_LAT_US[proto][3] * _US
    return base + (steps - inter_steps) * intra + inter_steps * net + bus_bytes / _proto_bw(g, proto, all_reduce)


@lru_cache(maxsize=8192)  # the planner asks the same few thousand (group, size) pairs per search
def all_reduce_s(g: Group, size_bytes: float) -> float:
    """All-reduce of ``size_bytes`` per rank: the cheaper of ring and tree on the best protocol."""
    n = g.size
    if n <= 1 or size_bytes <= 0:
        return 0.0
    bus_bytes = 2 * (n - 1) / n * size_bytes
    inter_steps = 2 * g.nodes if g.crosses_nodes else 0
    best = min(_ring_s(g, bus_bytes, 2 * (n - 1), inter_steps, p, True) for p in _protocols(g))
    for p in _protocols(g):
        base = _TREE_LAT_US[p][0] * _US
        lat = base + 2 * (
            (g.ranks_per_node - 1) * g._intra_hop_s(p, _TREE_LAT_US)
            + math.ceil(math.log2(g.nodes)) * _TREE_LAT_US[p][3] * _US
        )
        best = min(best, lat + bus_bytes / (_proto_bw(g, p, True) * _TREE_BW))
    return best


@lru_cache(maxsize=8192)
def all_gather_s(g: Group, size_bytes: float) -> float:
    """All-gather whose result is ``size_bytes`` on every rank (ring; reduce-scatter costs the same)."""
    n = g.size
    if n <= 1 or size_bytes <= 0:
        return 0.0
    inter_steps = g.nodes - 1 if g.crosses_nodes else 0
    return min(_ring_s(g, (n - 1) / n * size_bytes, n - 1, inter_steps, p, False) for p in _protocols(g))


reduce_scatter_s = all_gather_s
"""Reduce-scatter of ``size_bytes`` (the unreduced input on every rank): the ring all-gather's cost."""


@lru_cache(maxsize=8192)
def all_to_all_s(g: Group, size_bytes: float) -> float:
    """All-to-all of ``size_bytes`` per rank (``size_bytes/n`` to each rank; MoE dispatch/combine)."""
    n = g.size
    if n <= 1 or size_bytes <= 0:
        return 0.0
    ppn = min(g.ranks_per_node, n)
    intra_bw = (g.link_gb_per_s or g.bus_gb_per_s) * 1e9
    intra_s = (ppn - 1) / n * size_bytes / intra_bw
    lat = _RING_LAT_US["Simple"][0] * _US + g._intra_hop_s("Simple", _RING_LAT_US)
    inter_s = 0.0
    if g.crosses_nodes:
        nic = (g.nic_gb_per_s or g.bus_gb_per_s) * 1e9
        inter_s = (n - ppn) / n * size_bytes / nic
        lat += _RING_LAT_US["Simple"][3] * _US + (n - ppn) * _NET_POST_US * _US
    return lat + max(intra_s, inter_s)


def p2p_s(g: Group, size_bytes: float) -> float:
    if size_bytes <= 0:
        return 0.0
    return size_bytes / (g.bus_gb_per_s * 1e9) + g.latency_s
