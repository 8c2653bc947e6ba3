"""step_time on hand-built steps: additive decomposition, model FLOPs, MFU, monotonic in the GPU."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.hardware import all_gpus, get_gpu
from gpuplan.perf import DEFAULT_EFFICIENCY, model_flops, step_time
from gpuplan.perf.efficiency import efficiency_for
from gpuplan.perf.step_time import BREAKDOWN_KEYS
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
    # long kernels: the CPU's dispatch runs ahead, only the GPU gaps between kernels show
    eff = efficiency_for(get_gpu("H100-SXM"))
    assert t.overhead_s == pytest.approx(12 * eff.graph_launch_overhead_s)
    assert t.kernels == 12
    assert t.flops == 12 * 10**12
    assert set(t.breakdown_s) == set(BREAKDOWN_KEYS)
    assert sum(t.breakdown_s.values()) == pytest.approx(t.total_s)
    assert t.breakdown_s["launch"] == pytest.approx(t.overhead_s)
    assert t.breakdown_s["gemm"] + t.breakdown_s["memory_bound"] == pytest.approx(t.compute_s + t.memory_s)


def test_tiny_kernels_are_cpu_bound_in_eager_mode() -> None:
    # 1000 tiny adds: each kernel is far shorter than eager dispatch, so the phase takes the CPU's
    # time (1000 × dispatch) and the GPU kernels hide under it; the breakdown says "launch"
    add = OpRecord("aten.add.Tensor", "forward", "h.1", "other", "float32", 0, 8192, 4096, None, 1000)
    gpu = get_gpu("A100-80GB-SXM")
    eff = efficiency_for(gpu)
    t = step_time(_step([add]), gpu, Workload(mode="infer", precision="fp32"))
    assert t.total_s == pytest.approx(1000 * eff.launch_overhead_s)
    assert t.breakdown_s["launch"] == pytest.approx(t.total_s - t.breakdown_s["memory_bound"])
    assert any("CPU-bound" in a for a in t.assumptions)
    assert sum(t.by_op_class_s.values()) == pytest.approx(t.total_s)
    assert t.by_op_class_s["cpu_dispatch"] == pytest.approx(t.total_s - t.by_op_class_s["other"])


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


@settings(max_examples=60, deadline=None)
@given(
    ops=st.lists(_op, min_size=1, max_size=12),
    gpu=st.sampled_from([g for g in _GPUS if g.sm_count]),
    sms=st.floats(1.0, 2.0),
    per_sm=st.floats(1.0, 2.0),
    bw=st.floats(1.0, 2.0),
    precision=st.sampled_from(["fp32", "amp-bf16"]),
)
def test_better_on_every_axis_never_slower(
    ops: list[OpRecord], gpu: object, sms: float, per_sm: float, bw: float, precision: str
) -> None:
    """Issue 10 invariant: more SMs, each at least as fast, and more bandwidth is never slower (wave
    quantization included: fewer or equal waves, each no longer)."""
    base = gpu
    count = int(base.sm_count * sms)  # type: ignore[attr-defined]
    rate = count / base.sm_count * per_sm  # type: ignore[attr-defined]
    better = dataclasses.replace(
        base,
        sm_count=count,
        memory_bandwidth_gb_per_s=base.memory_bandwidth_gb_per_s * bw,  # type: ignore[attr-defined]
        **{f: (getattr(base, f) * rate if getattr(base, f) else None) for f in _RATE_FIELDS},
    )
    w = Workload(mode="train", precision=precision)
    step = _step(ops)
    assert step_time(step, better, w).total_s <= step_time(step, base, w).total_s * (1 + 1e-9)  # type: ignore[arg-type]


def _batch_ops(batch: int, shapes: list[tuple[int, int, int]], dtype: str) -> list[OpRecord]:
    """A layer stack whose GEMM rows (M) and elementwise bytes grow with the batch, as a trace's do."""
    e = 2 if dtype == "bfloat16" else 4
    out = []
    for m0, n, k in shapes:
        m = m0 * batch
        flops, read = 2 * m * n * k, e * (m * k + k * n)
        out.append(OpRecord("aten.mm.default", "forward", "l", "matmul", dtype, flops, read, e * m * n))
        out.append(OpRecord("aten.gelu.default", "forward", "l", "other", dtype, 0, e * m * n, e * m * n))
    return out


@settings(max_examples=80, deadline=None)
@given(
    shapes=st.lists(
        st.tuples(st.integers(1, 4096), st.integers(1, 8192), st.integers(1, 8192)), min_size=1, max_size=6
    ),
    batch=st.integers(1, 64),
    more=st.integers(1, 64),
    gpu=st.sampled_from(_GPUS),
    dtype=st.sampled_from(["float32", "bfloat16"]),
)
def test_more_batch_never_lowers_step_time(
    shapes: list[tuple[int, int, int]], batch: int, more: int, gpu: object, dtype: str
) -> None:
    """Issue 10 invariant: a larger batch never takes less time (tile/wave quantization included)."""
    w = Workload(mode="infer", precision="amp-bf16" if dtype == "bfloat16" else "fp32")
    small = step_time(_step(_batch_ops(batch, shapes, dtype)), gpu, w).total_s  # type: ignore[arg-type]
    large = step_time(_step(_batch_ops(batch + more, shapes, dtype)), gpu, w).total_s  # type: ignore[arg-type]
    assert large >= small * (1 - 1e-9)
