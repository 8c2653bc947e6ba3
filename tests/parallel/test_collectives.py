"""Collective-time arithmetic and group placement on the topology."""

from __future__ import annotations

import pytest

from gpuplan.errors import ConfigError, LayoutError
from gpuplan.hardware import get_gpu
from gpuplan.parallel.collectives import all_gather_s, all_reduce_s, group, p2p_s
from gpuplan.parallel.topology import INTER_EFFICIENCY, INTRA_EFFICIENCY, INTRA_LATENCY_S, make_topology


def test_defaults_from_catalog() -> None:
    # H100 SXM: NVLink 4, 900 GB/s bidirectional -> 450 per direction (catalog); DGX H100 NICs 400 Gb/s.
    t = make_topology(get_gpu("H100-SXM"), 64, nodes=8)
    assert (t.nodes, t.gpus_per_node, t.intra_gb_per_s, t.inter_gb_per_s) == (8, 8, 450.0, 50.0)
    a100 = make_topology(get_gpu("A100-80GB-SXM"), 16)
    assert (a100.nodes, a100.intra_gb_per_s, a100.inter_gb_per_s) == (2, 300.0, 25.0)
    custom = make_topology(get_gpu("H100-SXM"), 16, nodes=2, inter_node_gbps=100)
    assert custom.inter_gb_per_s == 12.5


def test_ring_all_reduce_inside_a_node() -> None:
    t = make_topology(get_gpu("H100-SXM"), 8)
    g = group(t, 8, 1)
    assert not g.crosses_nodes and g.bus_gb_per_s == pytest.approx(450 * INTRA_EFFICIENCY)
    size = 1e9
    bw_term = 2 * 7 / 8 * size / (450 * INTRA_EFFICIENCY * 1e9)
    # NCCL picks tree latency (2·log2 8 = 6 steps) over ring (2·7 steps); same bus bytes
    assert all_reduce_s(g, size) == pytest.approx(bw_term + 6 * INTRA_LATENCY_S)
    assert all_gather_s(g, size) == pytest.approx(bw_term / 2 + 7 * INTRA_LATENCY_S)


def test_group_across_nodes_uses_its_nics() -> None:
    t = make_topology(get_gpu("H100-SXM"), 64, nodes=8)
    dp_stride_8 = group(t, 8, 8)  # one member per node (tp = 8 inside each node)
    assert dp_stride_8.crosses_nodes
    assert dp_stride_8.bus_gb_per_s == pytest.approx(50 * INTER_EFFICIENCY)
    dp_stride_2 = group(t, 32, 2)  # 4 members per node, 4 NICs
    assert dp_stride_2.bus_gb_per_s == pytest.approx(4 * 50 * INTER_EFFICIENCY)
    assert p2p_s(dp_stride_8, 0) == 0.0


def test_topology_errors() -> None:
    with pytest.raises(LayoutError, match=r"12 GPUs do not split evenly over 5 nodes \(12 mod 5 = 2\)"):
        make_topology(get_gpu("H100-SXM"), 12, nodes=5)
    with pytest.raises(LayoutError, match=r"nodes\(2\)·gpus-per-node\(8\) = 16 ≠ 12 GPUs"):
        make_topology(get_gpu("H100-SXM"), 12, nodes=2, gpus_per_node=8)
    with pytest.raises(ConfigError, match="must be a positive, finite bandwidth"):
        make_topology(get_gpu("H100-SXM"), 16, nodes=2, inter_node_gbps=0)
