"""The per-rank accounting's arithmetic: FSDP2 shards, ZeRO-1 partitions, layout terms."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from gpuplan.measure.per_rank import ParamLayout, account, fsdp_shard_numel, zero1_partition

shapes = st.lists(st.lists(st.integers(1, 40), min_size=1, max_size=3).map(tuple), min_size=1, max_size=12)


@given(shape=st.lists(st.integers(1, 50), min_size=1, max_size=3).map(tuple), nproc=st.integers(1, 9))
def test_fsdp_shards_are_torch_chunk(shape: tuple[int, ...], nproc: int) -> None:
    # FSDP2 splits dim 0 with torch.chunk (torch/distributed/fsdp/_fully_shard/_fsdp_param.py,
    # _chunk_with_empty): the reference here is torch.chunk itself, padded with empty shards
    chunks = torch.chunk(torch.empty(shape, device="meta"), nproc, dim=0)
    expected = [c.numel() for c in chunks] + [0] * (nproc - len(chunks))
    assert [fsdp_shard_numel(shape, r, nproc) for r in range(nproc)] == expected


@given(shapes=shapes, nproc=st.integers(1, 8))
def test_zero1_partition_covers_everything_once(shapes: list[tuple[int, ...]], nproc: int) -> None:
    loads = zero1_partition(tuple(shapes), nproc)
    assert len(loads) == nproc
    assert sum(loads) == sum(math.prod(s) for s in shapes)
    # greedy largest-first: no rank exceeds the lightest by more than the largest parameter
    assert max(loads) - min(loads) <= max(math.prod(s) for s in shapes)


def _params() -> ParamLayout:
    return ParamLayout(shapes=((100, 10), (10,), (50, 10), (50, 10)), root_numel=1010,
                       block_numels=(500, 500), element_bytes=4)


def test_ddp_adds_one_bucket_copy_of_the_gradients() -> None:
    est = account("ddp", 2, 1_000_000, {"optimizer_state": 16_000}, _params())
    assert est.tensor_peak_bytes == (1_000_000 + 2010 * 4,) * 2


def test_fsdp_shards_states_and_adds_the_working_set() -> None:
    p = _params()
    est = account("fsdp", 2, 1_000_000, {"optimizer_state": 2 * 2010 * 4, "gradients": 0}, p)
    # rank shards: (50,10)+(5,)+(25,10)+(25,10) = 1005 elements each
    sharded = 1005 * 4 + 2 * 1005 * 4
    working = (1010 + 500) * 4
    assert est.tensor_peak_bytes == (1_000_000 - 2010 * 4 - 2 * 2010 * 4 + sharded + working,) * 2


def test_unknown_layout_has_no_accounting() -> None:
    with pytest.raises(ValueError, match="no per-rank accounting"):
        account("pp", 2, 1, {}, _params())


def test_compare_ranks_rows() -> None:
    from gpuplan.measure.per_rank import RankEstimate, compare_ranks
    from gpuplan.measure.results import Measured

    est = RankEstimate(layout="ddp", nproc=2, tensor_peak_bytes=(100, 100))
    ranks = [Measured(device="cuda", steps=1, warmup=1, step_time_s=0.1, step_times_s=(0.1,), rank=i,
                      world_size=2, tracked_peak_bytes=100 + i * 10, total_bytes=1000) for i in range(2)]
    planner = {"per_rank_bytes": 90, "per_rank_total_bytes": 900}
    rows = {c.quantity: c for c in compare_ranks(est, ranks, planner)}
    assert rows["rank 1 tracked peak"].error == pytest.approx(100 / 110 - 1)
    assert rows["rank 0 vs planner"].estimated == 90
    assert rows["rank 1 total (with context)"].error == pytest.approx(-0.1)
    assert rows["step time (rank 0)"].measured == 0.1
