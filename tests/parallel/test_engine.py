"""Megatron-LM's own kernels in the planner (gpuplan.parallel.engine).

The fused scale-mask-softmax's traffic is its CUDA kernel's I/O (Megatron-LM
``megatron/fused_kernels/scaled_upper_triang_masked_softmax.h``): forward reads the 16-bit scores
[b·a, s, s] once and writes the 16-bit probabilities once; backward reads the output gradient and the
probabilities once each and writes the input gradient once. The tests count those bytes exactly
against the tiny model's shape and check that nothing else of the traced program changes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.models.sources import HFConfigSource
from gpuplan.parallel.engine import FUSED_SOFTMAX, FUSED_SOFTMAX_BACKWARD, megatron_gemm_scale, megatron_ops
from gpuplan.parallel.evaluate import Context, evaluate
from gpuplan.parallel.layout import DDP, FSDP2, Layout, MegatronDDP, Zero
from gpuplan.trace.records import OpRecord
from gpuplan.trace.step import trace_step
from gpuplan.workload import Workload

B, S, HEADS, HIDDEN = 2, 32, 2, 64
TINY_GPT2 = {
    "model_type": "gpt2",
    "architectures": ["GPT2LMHeadModel"],
    "n_embd": HIDDEN,
    "n_layer": 3,
    "n_head": HEADS,
    "n_positions": S,
    "vocab_size": 128,
    "activation_function": "gelu",
}


@pytest.fixture(scope="module")
def eager_ops() -> list[OpRecord]:
    """Training ops of a tiny GPT-2, eager attention under AMP fp16, full recompute (fake tensors)."""
    w = Workload(mode="train", batch_size=B, seq_len=S, precision="amp-fp16", attention="eager", checkpointing="full")
    step = trace_step(HFConfigSource("tiny-gpt2", TINY_GPT2, default_seq_len=S), w, compute_capability=(8, 0))
    assert step.run is not None
    return [op for op in step.run.trace.ops if op.phase in ("forward", "loss", "backward")]


@pytest.mark.slow
def test_fused_softmax_moves_exactly_the_kernels_bytes(eager_ops: list[OpRecord]) -> None:
    fused = megatron_ops(eager_ops, compute_bytes=2)
    scores = B * HEADS * S * S  # elements of one block's attention scores
    fwd = [op for op in fused if op.name == FUSED_SOFTMAX]
    bwd = [op for op in fused if op.name == FUSED_SOFTMAX_BACKWARD]
    softmax = Counter(op.name for op in eager_ops)
    # one fused kernel per softmax of the trace: forward, recomputed forward, backward
    assert len(fwd) == softmax["aten._softmax.default"] > 0
    assert len(bwd) == softmax["aten._softmax_backward_data.default"] > 0
    assert {(op.bytes_read, op.bytes_written) for op in fwd} == {(2 * scores, 2 * scores)}
    assert {(op.bytes_read, op.bytes_written) for op in bwd} == {(4 * scores, 2 * scores)}
    assert all(op.flops == 0 and op.op_class == "other" for op in fwd + bwd)


@pytest.mark.slow
def test_only_the_softmax_chains_change(eager_ops: list[OpRecord]) -> None:
    fused = megatron_ops(eager_ops, compute_bytes=2)
    kept = [op for op in fused if op.name not in (FUSED_SOFTMAX, FUSED_SOFTMAX_BACKWARD)]
    removed = Counter(eager_ops) - Counter(kept)
    # every GEMM and every dropout (attention dropout stays a kernel of its own in Megatron) is kept
    assert [op for op in eager_ops if op.op_class == "matmul"] == [op for op in kept if op.op_class == "matmul"]
    assert [op for op in eager_ops if "dropout" in op.name] == [op for op in kept if "dropout" in op.name]
    # what went: the softmax and its scale / mask / dtype casts, all on the attention scores
    names = {op.name for op in removed.elements()}
    assert "aten._softmax.default" in names and "aten._softmax_backward_data.default" in names
    assert names <= {
        "aten._softmax.default", "aten._softmax_backward_data.default", "aten.mul.Tensor", "aten.add.Tensor",
        "aten._to_copy.default", "aten._unsafe_view.default", "aten.div.Tensor", "aten.where.self",
    }
    before = sum(op.bytes_read + op.bytes_written for op in eager_ops)
    after = sum(op.bytes_read + op.bytes_written for op in fused)
    assert after < before


def test_no_softmax_no_change() -> None:
    # SDPA / flash attention leave no softmax in the trace: Megatron's program is the traced one
    w = Workload(mode="train", batch_size=B, seq_len=S, precision="amp-fp16", attention="sdpa-efficient")
    step = trace_step(HFConfigSource("tiny-gpt2", TINY_GPT2, default_seq_len=S), w, compute_capability=(8, 0))
    assert step.run is not None
    ops = list(step.run.trace.ops)
    assert megatron_ops(ops, compute_bytes=2) == ops


def test_only_megatron_layouts_run_megatrons_kernels(gpt2_ctx) -> None:  # type: ignore[no-untyped-def]
    # gpt2 traced with its default attention; the engine's times differ from the eager ones, and
    # only a Megatron layout reads them
    eager_only = Context(replace(gpt2_ctx.profile, megatron_time=None), *astuple_rest(gpt2_ctx))
    for sharding in (DDP(), Zero(1), FSDP2()):
        lay = Layout(dp=4, tp=2, pp=1, micro_batch_size=4, grad_accum=1, sharding=sharding)
        assert evaluate(gpt2_ctx, lay).step_time_s == evaluate(eager_only, lay).step_time_s
    lay = Layout(dp=4, tp=2, pp=1, micro_batch_size=4, grad_accum=1, sharding=MegatronDDP())
    assert evaluate(gpt2_ctx, lay).step_time_s != evaluate(eager_only, lay).step_time_s


def astuple_rest(ctx: Context) -> tuple[object, ...]:
    return ctx.topology, ctx.usable_bytes, ctx.overhead_bytes


def test_megatron_gemm_scale_is_the_fitted_fraction() -> None:
    # fitted by scripts/fit_engine_factors.py (Korthikanti Table 5); a rate, so in (0, 1.2]
    assert 0.0 < megatron_gemm_scale() <= 1.2


_EW = ("aten.mul.Tensor", "aten.add.Tensor", "aten._to_copy.default")


def _op(name: str, op_class: str, read: int, written: int) -> OpRecord:
    return OpRecord(name, "forward", "h.0.attn", op_class, "float16", 0, read, written, block="h:0")


@given(
    n=st.integers(1, 1 << 20),
    before=st.lists(st.sampled_from(_EW), max_size=4),
    after=st.lists(st.sampled_from(_EW), max_size=4),
    dropout=st.booleans(),
)
@settings(max_examples=60, deadline=None)
def test_chain_property(n: int, before: list[str], after: list[str], dropout: bool) -> None:
    # bmm -> elementwise chain -> softmax (fp32) -> chain -> [dropout] -> bmm: one kernel, boundaries kept
    ops = [_op("aten.bmm.default", "matmul", 4 * n, 2 * n)]
    ops += [_op(name, "other", 2 * n, 2 * n) for name in before]
    ops.append(OpRecord("aten._softmax.default", "forward", "h.0.attn", "other", "float32", 0, 4 * n, 4 * n))
    ops += [_op(name, "other", 4 * n, 2 * n) for name in after]
    if dropout:
        ops.append(_op("aten.native_dropout.default", "other", 2 * n, 3 * n))
    ops.append(_op("aten.bmm.default", "matmul", 4 * n, 2 * n))
    out = megatron_ops(ops, compute_bytes=2)
    drop = ["aten.native_dropout.default"] if dropout else []
    assert [op.name for op in out] == ["aten.bmm.default", FUSED_SOFTMAX, *drop, "aten.bmm.default"]
    assert sum(o.bytes_read + o.bytes_written for o in out) <= sum(o.bytes_read + o.bytes_written for o in ops)


def test_engine_factor_fitted_on_public_rows_only() -> None:
    # scripts/fit_engine_factors.py stores the Korthikanti fit; its check is Megatron Table 1's public rows
    from test_megatron import KORTHIKANTI_T5, MEGATRON_T1

    from gpuplan.parallel.engine import engine_factors

    meg = engine_factors()["megatron"]
    assert set(meg["fitted_on"]) == set(KORTHIKANTI_T5)
    assert set(meg["check"]) == set(MEGATRON_T1)
    assert meg["gemm_scale"] == megatron_gemm_scale()
