"""The search's memo (``evaluate.Context.memo``) never changes an answer.

A search evaluates thousands of layouts against one Context, which keeps what layouts of the same shape share
(the stages' activations, one micro-batch on the slowest stage, the collectives of a sharding). Each entry is
keyed by the layout fields its computation reads; a field left out of a key would hand one layout another's
figures. So every layout of several searches (the escalations' too) is evaluated twice: in one shared Context,
in search order, and each in a Context of its own (an empty memo). The two must be equal, exactly.
"""

from __future__ import annotations

from typing import Any

from gpuplan.parallel.evaluate import Context, Evaluation, evaluate
from gpuplan.parallel.layout import DDP, FSDP2, Layout, MegatronDDP, Zero
from gpuplan.parallel.search import Constraints, candidates

VARIANTS: tuple[dict[str, Any], ...] = (
    {},
    {"offload": True},
    {"checkpointing": "full"},
    {"search_cp": True},
    {"search_cp": True, "cp_comm": "all-to-all"},
    {"search_cp": True, "cp_comm": "hierarchical", "checkpointing": "full"},
    {"sequence_parallel": False},
    {"megatron": True},
    {"pp": 2, "global_batch": 256},
    {"fsdp": True, "fsdp_sharded_fp32": True},
    {"fsdp": True, "fsdp_reshard": "never", "pp": 2, "global_batch": 256},
)


def _fresh(ctx: Context) -> Context:
    return Context(ctx.profile, ctx.topology, ctx.usable_bytes, ctx.overhead_bytes)


def _layouts(ctx: Context, gpus: tuple[int, ...], global_batch: int) -> list[Layout]:
    """Every candidate of each variant, for several GPU counts on one Context (so that layouts with the same
    degrees but one, e.g. dp·tp·pp alike with another cp, meet in one memo)."""
    p = ctx.profile
    out: list[Layout] = []
    for n, variant in ((n, v) for n in gpus for v in VARIANTS):
        c = Constraints(**{"gpus": n, "global_batch": global_batch, "seq_len": p.seq_len, **variant})
        out += candidates(c, heads=p.heads, kv_heads=p.kv_heads, layers=p.layers,
                          gpus_per_node=ctx.topology.gpus_per_node, experts=p.experts)
    return out


def _same(shared: Context, layouts: list[Layout]) -> None:
    firsts: list[Evaluation] = [evaluate(shared, lay) for lay in layouts]
    again = [evaluate(shared, lay) for lay in reversed(layouts)][::-1]  # hits in the other order
    assert len(shared.memo) > 0
    for lay, first, second in zip(layouts, firsts, again, strict=True):
        alone = evaluate(_fresh(shared), lay)
        assert first == alone, lay
        assert second == alone, lay


def test_shared_memo_equals_fresh_contexts_gpt2(gpt2_ctx: Context) -> None:
    shared = _fresh(gpt2_ctx)
    layouts = _layouts(shared, (16, 32), 64)
    # uneven pipeline stages (12 blocks over 5 stages: 1, 3, 3, 3, 2) at several micro-batch counts
    layouts += [
        Layout(dp=1, tp=1, pp=5, micro_batch_size=m, grad_accum=ga, sharding=s, first_stage_layers=1,
               last_stage_layers=2)
        for m, ga in ((1, 1), (1, 2), (1, 8), (2, 4)) for s in (DDP(), Zero(1), MegatronDDP())
    ]
    # 1F1B and both interleaved depths of one pipeline (12 blocks, 3 stages of 4)
    layouts += [
        Layout(dp=2, tp=1, pp=3, micro_batch_size=1, grad_accum=6, sharding=s, schedule=sched, virtual_stages=v)
        for sched, v in (("1f1b", 1), ("interleaved", 2), ("interleaved", 4)) for s in (DDP(), MegatronDDP())
    ]
    assert len(layouts) > 1000
    _same(shared, layouts)


def test_shared_memo_equals_fresh_contexts_moe(moe_ctx: Context) -> None:
    shared = _fresh(moe_ctx)
    layouts = _layouts(shared, (8, 16), 32)
    assert {lay.ep for lay in layouts} >= {1, 2, 4, 8}
    assert any(isinstance(lay.sharding, FSDP2) and lay.cp > 1 for lay in layouts)
    assert any(isinstance(lay.sharding, Zero) and lay.sharding.offload_params for lay in layouts)
    _same(shared, layouts)


def test_replace_starts_an_empty_memo(moe_ctx: Context) -> None:
    from dataclasses import replace

    ctx = _fresh(moe_ctx)
    evaluate(ctx, Layout(dp=8, tp=2, pp=1, micro_batch_size=2, grad_accum=1, ep=2, sharding=FSDP2()))
    assert ctx.memo
    assert not replace(ctx, usable_bytes=ctx.usable_bytes).memo


def test_the_lazy_16_bit_trace_is_trace_time_not_search_time(gpt2_ctx: Context) -> None:
    """The 16-bit-module activations are traced when the first layout of an engine holding the 16-bit copy asks
    (inside the search); the plan counts those seconds as trace time, so ``layouts_per_s`` times the search."""
    import time
    from dataclasses import replace

    from gpuplan.parallel.plan import _Search
    from gpuplan.parallel.profile import LazyActivations

    wait_s = 0.5
    prof = gpt2_ctx.profile

    def slow_trace():  # type: ignore[no-untyped-def]
        time.sleep(wait_s)
        return prof.activations(False)

    ctx = Context(replace(prof, module_dtype_trace=LazyActivations(slow_trace)), gpt2_ctx.topology,
                  gpt2_ctx.usable_bytes, gpt2_ctx.overhead_bytes)
    search = _Search(Constraints(gpus=32, global_batch=64, seq_len=prof.seq_len), prof.heads, prof.kv_heads,
                     gpt2_ctx.topology)
    assert search.rank(ctx)
    assert search.trace_s >= wait_s
    assert search.search_s < wait_s
