"""Expert parallelism as a planner layout, on a tiny Mixtral built on fake tensors (8 experts, top-2).

Exact accounting from the config: a Mixtral block's routed experts hold E·3·h·f parameters
(transformers' ``MixtralExperts``: gate_up_proj 2f×h and down_proj h×f per expert).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.errors import LayoutError
from gpuplan.parallel.collectives import all_to_all_s, group
from gpuplan.parallel.evaluate import evaluate, memory
from gpuplan.parallel.layout import DDP, FSDP2, Layout, MegatronDDP, Sharding, Zero
from gpuplan.parallel.search import Constraints, candidates

H, F, E, K, SEQ, MB = 64, 128, 8, 2, 64, 2


def test_profile_counts_routed_experts_and_active_compute(moe_ctx) -> None:  # type: ignore[no-untyped-def]
    p = moe_ctx.profile
    assert (p.experts, p.experts_per_token) == (E, K)
    assert p.block_expert_params == E * 3 * H * F
    # compute is on the active parameters only: per token, 6 FLOPs per active parameter (forward +
    # backward) plus attention's score and value matmuls 12·s·h (forward 4·s·h, backward twice that).
    # Tolerance 5 %: the router's softmax/top-k and norms are not matmuls.
    active = p.block_params - p.block_expert_params + p.block_expert_params * K / E
    per_token = p.block_model_flops / (MB * SEQ)
    assert per_token == pytest.approx(6 * active + 12 * SEQ * H, rel=0.05)
    assert per_token < 6 * p.block_params / 2  # far below all experts' parameters


@pytest.mark.parametrize("sharding", [DDP(), MegatronDDP(), Zero(1), Zero(3), FSDP2()], ids=lambda s: s.name)
def test_each_rank_holds_its_share_of_the_experts(moe_ctx, sharding: Sharding) -> None:  # type: ignore[no-untyped-def]
    p = moe_ctx.profile
    base = Layout(dp=8, tp=1, pp=1, micro_batch_size=MB, grad_accum=1, sharding=sharding)
    (one,) = memory(moe_ctx, base)
    for ep in (2, 4, 8):
        (r,) = memory(moe_ctx, Layout(dp=8, tp=1, pp=1, micro_batch_size=MB, grad_accum=1, sharding=sharding, ep=ep))
        states = r.params_bytes + r.grads_bytes + r.optimizer_bytes
        assert states <= one.params_bytes + one.grads_bytes + one.optimizer_bytes
        if isinstance(sharding, DDP):
            # replicated engine: the experts' fp32 weights shrink by exactly (1 − 1/ep)
            expert_total = p.block_expert_params * p.layers
            gone = p.param_bytes_per_param * expert_total * (1 - 1 / ep)
            assert one.params_bytes - r.params_bytes == pytest.approx(gone, abs=2)


def test_all_to_all_per_moe_layer(moe_ctx) -> None:  # type: ignore[no-untyped-def]
    # dispatch + combine in forward and in backward: 4 all-to-alls of tokens·k·h·2 bytes per MoE layer
    p = moe_ctx.profile
    lay = Layout(dp=8, tp=1, pp=1, micro_batch_size=MB, grad_accum=3, ep=4)
    ev = evaluate(moe_ctx, lay)
    one = all_to_all_s(group(moe_ctx.topology, 4, 1), MB * SEQ * K * H * 2)
    assert ev.time_parts_s["ep_comm"] == pytest.approx(3 * p.layers * 4 * one)
    no_ep = evaluate(moe_ctx, Layout(dp=8, tp=1, pp=1, micro_batch_size=MB, grad_accum=3))
    assert no_ep.time_parts_s["ep_comm"] == 0.0
    # expert compute per rank is unchanged: the tokens are spread over the ep ranks (balanced routing)
    assert ev.time_parts_s["compute"] == pytest.approx(no_ep.time_parts_s["compute"])


def test_search_includes_expert_parallel_layouts(moe_ctx) -> None:  # type: ignore[no-untyped-def]
    c = Constraints(gpus=16, global_batch=32)
    lays = list(candidates(c, heads=4, kv_heads=2, layers=4, gpus_per_node=8, experts=E))
    eps = {lay.ep for lay in lays}
    assert eps == {1, 2, 4, 8}
    assert all(lay.dp % lay.ep == 0 and E % lay.ep == 0 for lay in lays)
    dense = list(candidates(c, heads=4, kv_heads=2, layers=4, gpus_per_node=8, experts=0))
    assert {lay.ep for lay in dense} == {1}


def test_layout_refuses_ep_that_does_not_divide_dp() -> None:
    with pytest.raises(LayoutError, match=r"ep\(3\) must be at least 1 and divide dp\(8\)"):
        Layout(dp=8, tp=1, pp=1, micro_batch_size=1, grad_accum=1, ep=3)
    with pytest.raises(LayoutError, match=r"expert parallelism \(ep=2\) with HSDP"):
        Layout(dp=8, tp=1, pp=1, micro_batch_size=1, grad_accum=1, ep=2, sharding=FSDP2(hsdp_shard=4))


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(
    ep=st.sampled_from([2, 4]),
    sharding=st.sampled_from([DDP(), Zero(1), Zero(2), Zero(3), FSDP2()]),
    mbs=st.sampled_from([1, 2, 4]),
)
def test_more_expert_sharding_never_more_memory(moe_ctx, ep: int, sharding: Sharding, mbs: int) -> None:  # type: ignore[no-untyped-def]
    a = Layout(dp=8, tp=1, pp=1, micro_batch_size=mbs, grad_accum=1, sharding=sharding, ep=ep)
    b = Layout(dp=8, tp=1, pp=1, micro_batch_size=mbs, grad_accum=1, sharding=sharding, ep=2 * ep)
    # from ep 2 on (ep 1 has no dispatch buffers: one MoE layer's all-to-all receive buffers appear)
    ma = max(r.total_bytes for r in memory(moe_ctx, a))
    mb = max(r.total_bytes for r in memory(moe_ctx, b))
    assert mb <= ma


@pytest.mark.slow
def test_emit_expresses_ep_only_for_megatron(moe_ctx) -> None:  # type: ignore[no-untyped-def]
    from conftest import TINY_MIXTRAL
    from gpuplan.models.sources import HFConfigSource
    from gpuplan.parallel.emit import emit, refusal
    from gpuplan.parallel.plan import plan

    torch_ep = Layout(dp=8, tp=1, pp=1, micro_batch_size=1, grad_accum=1, ep=2)
    for kind in ("torchrun", "deepspeed", "accelerate"):
        msg = refusal(torch_ep, kind)
        assert msg is not None and "expert parallelism (ep=2)" in msg and "\n" not in msg
    src = HFConfigSource("tiny-mixtral", TINY_MIXTRAL, default_seq_len=SEQ)
    p = plan(
        src,
        gpus=8,
        gpu="H100-SXM",
        dp=8,
        ep=4,
        megatron=True,
        global_batch_size=16,
        micro_batch_size=MB,
        seq_len=SEQ,
        precision="amp-bf16",
    )
    assert p.best.layout.ep == 4 and p.to_dict()["parallelism"]["ep"] == 4
    assert p.best.time_parts_s["ep_comm"] > 0
    text = emit(p, "torchrun")
    assert "--expert-model-parallel-size 4" in text and f"--num-experts {E} --moe-router-topk {K}" in text
    assert refusal(p.best.layout, "accelerate") is not None


def test_fixed_ep_refused_with_the_arithmetic() -> None:
    from gpuplan.parallel.search import validate

    with pytest.raises(LayoutError, match=r"ep\(2\) needs a mixture-of-experts model; .* use --ep 1"):
        validate(Constraints(gpus=8, global_batch=8, ep=2), heads=4, kv_heads=4, layers=4, experts=0)
    with pytest.raises(LayoutError, match=r"ep\(3\) does not divide the 8 experts per layer \(8 mod 3 = 2\)"):
        validate(Constraints(gpus=12, global_batch=12, ep=3), heads=4, kv_heads=4, layers=4, experts=E)
    with pytest.raises(LayoutError, match=r"ep\(4\) does not divide dp\(2\)"):
        validate(Constraints(gpus=8, global_batch=8, dp=2, ep=4), heads=4, kv_heads=4, layers=4, experts=E)
