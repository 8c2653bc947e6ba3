"""step_time on hand-built steps: additive decomposition, model FLOPs, MFU, monotonic in the GPU."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.hardware import all_gpus, get_gpu
from gpuplan.perf import DEFAULT_EFFICIENCY, model_flops, step_time
from gpuplan.trace.records import OpRecord
from gpuplan.trace.step import TracedStep
from gpuplan.workload import Workload


def _step(ops: list[OpRecord], **kw: object) -> TracedStep:
    fields: dict[str, object] = dict(
        ops=tuple(ops),
        tensor_peak_bytes=0,
        tensor_components={},
        peak_phase="forward",
        params_count=0,
        param_bytes=0,
        block_counts={},
        traced_blocks={},
        rounded_peak_bytes=0,
        reserved_peak_bytes=0,
        top_activation_modules=(),
        attention_backends={},
    )
    fields.update(kw)
    return TracedStep(**fields)  # type: ignore[arg-type]


def _mm(
    phase: str, flops: int, *, block: str | None = "h:1", count: int = 1, dtype: str = "bfloat16"
) -> OpRecord:
    return OpRecord(
        "aten.mm.default", phase, "h.1.mlp", "matmul", dtype, flops, 1 << 24, 1 << 23, block, count
    )


def test_total_is_compute_plus_memory_plus_overhead() -> None:
    ops = [
        _mm("forward", 10**12, count=4),
        _mm("backward", 2 * 10**12, count=4),
        OpRecord("aten.add.Tensor", "forward", "h.1", "other", "bfloat16", 0, 1 << 26, 1 << 25, "h:1", 4),
    ]
    w = Workload(mode="train", precision="amp-bf16")
    t = step_time(_step(ops), get_gpu("H100-SXM"), w)
    assert t.total_s == pytest.approx(t.compute_s + t.memory_s + t.overhead_s)
    assert t.total_s == pytest.approx(sum(t.by_phase_s.values()))
    assert t.overhead_s == pytest.approx(12 * DEFAULT_EFFICIENCY.launch_overhead_s)
    assert t.kernels == 12
    assert t.flops == 12 * 10**12


def test_mfu_counts_model_flops_against_the_dtype_peak() -> None:
    # full checkpointing re-runs the blocks' forward in backward: hardware FLOPs 4F, model FLOPs 3F
    f = 10**12
    ops = [_mm("forward", f), _mm("backward", f), _mm("backward", 2 * f)]
    w = Workload(mode="train", precision="amp-bf16", checkpointing="full")
    step = _step(ops)
    assert model_flops(step, w) == 3 * f
    gpu = get_gpu("A100-80GB-SXM")
    t = step_time(step, gpu, w)
    assert t.mfu == pytest.approx(3 * f / (t.total_s * 312e12))
    assert t.tflops_achieved == pytest.approx(4 * f / t.total_s / 1e12)


def test_fp32_is_slower_than_tf32_on_ampere() -> None:
    # gpus-notes.md: A100 fp32 19.5 TFLOP/s on CUDA cores, TF32 156 on tensor cores (dense)
    ops = [_mm("forward", 10**13, dtype="float32")]
    gpu = get_gpu("A100-80GB-SXM")
    fp32 = step_time(_step(ops), gpu, Workload(mode="infer", precision="fp32")).total_s
    tf32 = step_time(_step(ops), gpu, Workload(mode="infer", precision="tf32")).total_s
    assert fp32 / tf32 == pytest.approx(
        (156 * DEFAULT_EFFICIENCY.tensor_core_matmul) / (19.5 * DEFAULT_EFFICIENCY.fp32_matmul), rel=0.01
    )


_GPUS = [g for g in all_gpus() if g.peak_tflops("bf16") and g.peak_tflops("fp32")]
_RATE_FIELDS = ("fp32_tflops", "tf32_tflops", "fp16_tflops", "bf16_tflops")
_op = st.builds(
    OpRecord,
    st.just("aten.mm.default"),
    st.sampled_from(["forward", "backward", "optimizer"]),
    st.just("m"),
    st.sampled_from(["matmul", "attention", "other"]),
    st.sampled_from(["float32", "bfloat16", "float16"]),
    st.integers(0, 10**13),
    st.integers(0, 1 << 32),
    st.integers(0, 1 << 30),
    st.none(),
    st.integers(1, 8),
)


@settings(max_examples=60, deadline=None)
@given(
    ops=st.lists(_op, min_size=1, max_size=12),
    gpu=st.sampled_from(_GPUS),
    bw=st.floats(1.0, 4.0),
    flops=st.floats(1.0, 4.0),
    precision=st.sampled_from(["fp32", "tf32", "amp-bf16", "amp-fp16"]),
)
def test_more_bandwidth_and_flops_never_slower(
    ops: list[OpRecord], gpu: object, bw: float, flops: float, precision: str
) -> None:
    """Invariant behind recommend's ranking: a GPU with >= bandwidth and FLOPs is never slower."""
    base = gpu
    faster = dataclasses.replace(
        base,
        memory_bandwidth_gb_per_s=base.memory_bandwidth_gb_per_s * bw,  # type: ignore[attr-defined]
        **{f: (getattr(base, f) * flops if getattr(base, f) else None) for f in _RATE_FIELDS},
    )
    w = Workload(mode="train", precision=precision)
    step = _step(ops)
    assert step_time(step, faster, w).total_s <= step_time(step, base, w).total_s * (1 + 1e-12)  # type: ignore[arg-type]
