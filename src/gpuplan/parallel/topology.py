"""The cluster: GPUs per node, the link inside a node, the network between nodes.

Defaults come from the GPU's catalog entry (NVLink or PCIe per direction). The network between
nodes is per GPU (one NIC per GPU, as in DGX/HGX systems): 200 Gb/s HDR InfiniBand for Ampere
DGX A100 (8× ConnectX-6 200 Gb/s), 400 Gb/s NDR for Hopper/Blackwell DGX H100/B200 (8× ConnectX-7
400 Gb/s); other GPUs get 100 Gb/s Ethernet/RoCE unless ``--inter-node-gbps`` says otherwise.

Bus-bandwidth efficiency and latencies are the communication model's
(:mod:`gpuplan.perf.collectives`, where their sources are cited).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuplan.errors import ConfigError, LayoutError
from gpuplan.perf.collectives import INTER_EFFICIENCY, INTER_LATENCY_S, INTRA_EFFICIENCY, INTRA_LATENCY_S

if TYPE_CHECKING:
    from gpuplan.hardware import GPU

__all__ = [
    "DEFAULT_GPUS_PER_NODE",
    "INTER_EFFICIENCY",
    "INTER_LATENCY_S",
    "INTRA_EFFICIENCY",
    "INTRA_LATENCY_S",
    "Topology",
    "make_topology",
]

DEFAULT_GPUS_PER_NODE = 8
"""GPUs per node when none is given (DGX / HGX boards)."""
_NIC_GBPS_BY_ARCH = {"Ampere": 200.0, "Hopper": 400.0, "Blackwell": 400.0}
DEFAULT_NIC_GBPS = 100.0


@dataclass(frozen=True, slots=True)
class Topology:
    nodes: int
    gpus_per_node: int
    intra_gb_per_s: float
    """GPU-to-GPU bandwidth inside a node, per direction (GB/s, decimal)."""
    intra_link: str
    inter_gb_per_s: float
    """Network bandwidth per GPU between nodes, per direction (GB/s)."""
    intra_efficiency: float = INTRA_EFFICIENCY
    inter_efficiency: float = INTER_EFFICIENCY

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def describe(self) -> str:
        return (
            f"{self.nodes} node(s) × {self.gpus_per_node} GPUs; "
            f"{self.intra_link} {self.intra_gb_per_s:g} GB/s "
            f"per direction inside a node (×{self.intra_efficiency} bus efficiency), "
            f"{self.inter_gb_per_s * 8:g} Gb/s per GPU between nodes (×{self.inter_efficiency})"
        )


def make_topology(
    gpu: GPU,
    gpus: int,
    *,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
    inter_node_gbps: float | None = None,
) -> Topology:
    """The cluster for ``gpus`` GPUs; ``nodes`` and ``gpus_per_node`` must multiply to ``gpus``."""
    if gpus < 1:
        raise LayoutError(f"--gpus must be at least 1, got {gpus}")
    for flag, count in (("--nodes", nodes), ("--gpus-per-node", gpus_per_node)):
        if count is not None and count < 1:
            raise LayoutError(f"{flag} must be at least 1, got {count}")
    if inter_node_gbps is not None and not (math.isfinite(inter_node_gbps) and inter_node_gbps > 0):
        raise ConfigError(
            f"--inter-node-gbps must be a positive, finite bandwidth in Gbit/s, got {inter_node_gbps:g} "
            "(e.g. 400 for NDR InfiniBand); leave it out for the GPU generation's default"
        )
    if nodes is None and gpus_per_node is None:
        gpus_per_node = min(gpus, DEFAULT_GPUS_PER_NODE)
        nodes = -(-gpus // gpus_per_node)
    elif nodes is None:
        assert gpus_per_node is not None
        nodes = -(-gpus // gpus_per_node)
    elif gpus_per_node is None:
        if gpus % nodes:
            raise LayoutError(
                f"{gpus} GPUs do not split evenly over {nodes} nodes ({gpus} mod {nodes} = {gpus % nodes})"
            )
        gpus_per_node = gpus // nodes
    if nodes * gpus_per_node != gpus:
        raise LayoutError(f"nodes({nodes})·gpus-per-node({gpus_per_node}) = {nodes * gpus_per_node} ≠ {gpus} GPUs")
    intra = gpu.intra_node_gb_per_s_per_direction
    if intra is None and gpus_per_node > 1:
        raise ConfigError(f"{gpu.id} cannot talk to a peer GPU (no NVLink or PCIe peer link in the catalog)")
    nic = inter_node_gbps if inter_node_gbps is not None else _NIC_GBPS_BY_ARCH.get(gpu.arch, DEFAULT_NIC_GBPS)
    return Topology(
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        intra_gb_per_s=intra or 0.0,
        intra_link=gpu.intra_node_link,
        inter_gb_per_s=nic / 8,
    )
