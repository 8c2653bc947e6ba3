"""Per-op roofline: which peak an op gets, and that the time is max(compute, memory) + launch."""

from __future__ import annotations

import pytest

from gpuplan.hardware import get_gpu
from gpuplan.perf.efficiency import DEFAULT_EFFICIENCY as EFF
from gpuplan.perf.roofline import launches_kernel, op_time, rate_key, weight_bytes_factor
from gpuplan.trace.records import OpRecord


def _mm(dtype: str, flops: int = 2 * 4096**3, nbytes: int = 3 * 4096**2 * 2) -> OpRecord:
    return OpRecord("aten.mm.default", "forward", "m", "matmul", dtype, flops, nbytes * 2 // 3, nbytes // 3)


def test_fp32_matmul_uses_cuda_cores_unless_tf32() -> None:
    # gpus-notes.md: PyTorch leaves TF32 off for matmuls by default (allow_tf32=False).
    a100 = get_gpu("A100-80GB-SXM")
    assert rate_key(_mm("float32"), "fp32", a100) == ("fp32", False)
    assert rate_key(_mm("float32"), "tf32", a100) == ("tf32", True)
    assert rate_key(_mm("bfloat16"), "amp-bf16", a100) == ("bf16", True)


def test_big_bf16_matmul_is_compute_bound_at_tensor_core_rate() -> None:
    h100 = get_gpu("H100-SXM")
    op = _mm("bfloat16")
    t = op_time(op, h100, "amp-bf16", EFF)
    peak = h100.peak_flops_per_s("bf16")
    assert peak is not None
    assert t.compute_bound
    assert t.compute_s == pytest.approx(op.flops / (peak * EFF.tensor_core_matmul))
    assert t.total_s == pytest.approx(t.compute_s + EFF.launch_overhead_s)


def test_elementwise_is_memory_bound() -> None:
    gpu = get_gpu("A100-80GB-SXM")
    op = OpRecord("aten.add.Tensor", "forward", "m", "other", "float32", 0, 8 << 20, 4 << 20)
    t = op_time(op, gpu, "fp32", EFF)
    assert t.compute_s == 0
    assert t.memory_s == pytest.approx((12 << 20) / (gpu.memory_bandwidth_bytes_per_s * EFF.bandwidth))


def test_non_kernel_ops_cost_nothing() -> None:
    op = OpRecord("aten.empty_like.default", "forward", "m", "other", "float32", 0, 0, 4 << 20)
    assert not launches_kernel(op)
    assert op_time(op, get_gpu("H100-SXM"), "fp32", EFF).total_s == 0


def test_weight_only_quant_cuts_decode_gemv_bytes() -> None:
    gpu = get_gpu("A100-80GB-SXM")
    weight, act = 4096 * 4096 * 2, 4096 * 2
    gemv = OpRecord(
        "aten.mm.default", "decode", "m", "matmul", "bfloat16", 2 * 4096 * 4096, weight + act, act
    )
    full = op_time(gemv, gpu, "bf16", EFF).memory_s
    int4 = op_time(gemv, gpu, "bf16", EFF, weight_quant="int4").memory_s
    assert int4 / full == pytest.approx(weight_bytes_factor("int4"), rel=0.01)
    assert weight_bytes_factor("int8") == (8 + 16 / 128) / 16  # 1 byte + an fp16 scale per 128 weights
