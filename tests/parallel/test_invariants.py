"""Invariants of the layout arithmetic (hypothesis), on one traced gpt2 profile."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.errors import LayoutError
from gpuplan.parallel.evaluate import evaluate, memory
from gpuplan.parallel.layout import DDP, FSDP2, Layout, Sharding, Zero, check_degrees

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
POW2 = st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128, 256])


def _peak(ctx, lay: Layout) -> int:  # type: ignore[no-untyped-def]
    return max(r.total_bytes for r in memory(ctx, lay))


@SETTINGS
@given(
    dp=st.sampled_from([4, 8, 16, 32, 64, 128]),
    tp=st.sampled_from([1, 2, 4]),
    mbs=st.sampled_from([1, 2, 4, 8]),
    ckpt=st.sampled_from(["none", "full"]),
)
def test_memory_never_rises_with_zero_stage(gpt2_ctx, dp: int, tp: int, mbs: int, ckpt: str) -> None:  # type: ignore[no-untyped-def]
    # dp >= 4: at dp = 2 DeepSpeed's ZeRO-3 gathers the largest layer (4 bytes/param, gpt2's 38.6M-param
    # tied embedding) which can outweigh half the 16-bit parameters it shards (docs/parallel.md).
    peaks = [
        _peak(
            gpt2_ctx,
            Layout(dp=dp, tp=tp, pp=1, micro_batch_size=mbs, grad_accum=1, sharding=z, checkpointing=ckpt),
        )
        for z in (DDP(), Zero(1), Zero(2), Zero(3))
    ]
    assert all(a >= b for a, b in itertools.pairwise(peaks)), peaks


@SETTINGS
@given(
    dp=st.sampled_from([2, 4, 8, 16, 32, 64]),
    tp=st.sampled_from([1, 2, 4]),
    mbs=st.sampled_from([1, 2, 4]),
    fsdp=st.booleans(),
    reshard=st.booleans(),
)
def test_memory_never_rises_with_dp_when_sharded(
    gpt2_ctx,
    dp: int,
    tp: int,
    mbs: int,
    fsdp: bool,  # type: ignore[no-untyped-def]
    reshard: bool,
) -> None:
    shard: Sharding = FSDP2(reshard_after_forward=reshard) if fsdp else Zero(3)
    small = _peak(gpt2_ctx, Layout(dp=dp, tp=tp, pp=1, micro_batch_size=mbs, grad_accum=1, sharding=shard))
    large = _peak(gpt2_ctx, Layout(dp=2 * dp, tp=tp, pp=1, micro_batch_size=mbs, grad_accum=1, sharding=shard))
    assert large <= small


@SETTINGS
@given(
    n=st.sampled_from([2, 4, 8, 16, 32]),
    per_gpu=st.sampled_from([1, 2, 4, 8]),
    mbs=st.sampled_from([1, 2, 4]),
)
def test_ddp_never_faster_than_linear(gpt2_ctx, n: int, per_gpu: int, mbs: int) -> None:  # type: ignore[no-untyped-def]
    # Same global batch on 1 GPU and on N GPUs (DDP): step time on N >= single-GPU time / N.
    if per_gpu % mbs:
        mbs = per_gpu
    global_batch = n * per_gpu
    single = evaluate(gpt2_ctx, Layout(dp=1, tp=1, pp=1, micro_batch_size=mbs, grad_accum=global_batch // mbs))
    multi = evaluate(gpt2_ctx, Layout(dp=n, tp=1, pp=1, micro_batch_size=mbs, grad_accum=per_gpu // mbs))
    assert multi.step_time_s >= single.step_time_s / n


@given(dp=st.integers(1, 64), tp=st.integers(1, 16), pp=st.integers(1, 16), gpus=st.integers(1, 1024))
def test_wrong_product_refused(dp: int, tp: int, pp: int, gpus: int) -> None:
    if dp * tp * pp == gpus:
        check_degrees(gpus, dp, tp, pp)
        return
    with pytest.raises(LayoutError, match=rf"dp\({dp}\)·tp\({tp}\)·pp\({pp}\) = {dp * tp * pp} ≠ {gpus} GPUs"):
        check_degrees(gpus, dp, tp, pp)


def test_first_pipeline_stage_holds_all_in_flight_micro_batches(gpt2_ctx) -> None:  # type: ignore[no-untyped-def]
    # 1F1B: the first stage holds pp micro-batches of its layers' activations, the last one
    # (Narayanan et al. 2021 Sec. 2.2.1; Korthikanti et al. 2022 Eq. 5); interleaving adds (p-1)/(p·v).
    p = gpt2_ctx.profile
    base = Layout(dp=1, tp=1, pp=4, micro_batch_size=4, grad_accum=8)
    first, last = memory(gpt2_ctx, base)
    per_layer = p.block_act_bytes * 4 / p.micro_batch
    stage_layers = p.layers // 4
    first_blocks = first.activations_bytes - (p.first_act_bytes * 4 + p.transient_bytes) * 4 // p.micro_batch
    assert first_blocks == pytest.approx(4 * stage_layers * per_layer, rel=1e-6)
    inter = Layout(dp=1, tp=1, pp=4, micro_batch_size=4, grad_accum=8, schedule="interleaved", virtual_stages=3)
    f2, _ = memory(gpt2_ctx, inter)
    assert f2.activations_bytes > first.activations_bytes
    assert last.activations_bytes < first.activations_bytes


def test_interleaving_shrinks_the_bubble(gpt2_ctx) -> None:  # type: ignore[no-untyped-def]
    one = evaluate(gpt2_ctx, Layout(dp=1, tp=1, pp=4, micro_batch_size=1, grad_accum=8))
    inter = evaluate(
        gpt2_ctx,
        Layout(dp=1, tp=1, pp=4, micro_batch_size=1, grad_accum=8, schedule="interleaved", virtual_stages=3),
    )
    # bubble = (p-1)/m of the ideal time for 1F1B, (p-1)/(v·m) interleaved (Narayanan et al. 2021, Sec. 2.2)
    assert one.time_parts_s["pipeline_bubble"] == pytest.approx(one.time_parts_s["compute"] * 3 / 8, rel=0.02)
    assert inter.time_parts_s["pipeline_bubble"] == pytest.approx(one.time_parts_s["pipeline_bubble"] / 3, rel=1e-6)


def test_sequence_parallel_shards_replicated_activations(gpt2_ctx) -> None:  # type: ignore[no-untyped-def]
    no_sp = memory(gpt2_ctx, Layout(dp=1, tp=4, pp=1, micro_batch_size=4, grad_accum=1, sequence_parallel=False))[0]
    sp = memory(gpt2_ctx, Layout(dp=1, tp=4, pp=1, micro_batch_size=4, grad_accum=1))[0]
    p = gpt2_ctx.profile
    assert no_sp.activations_bytes - sp.activations_bytes == pytest.approx(
        p.block_act_replicated_bytes * p.layers * (1 - 1 / 4), rel=1e-6
    )
