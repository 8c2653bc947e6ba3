"""Per-op roofline: which peak an op gets, the GEMM shape efficiency (tile and wave quantization,
K loop), and that the time is max(compute, memory) + the GPU gap between kernels."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.hardware import get_gpu
from gpuplan.perf.efficiency import DEFAULT_EFFICIENCY as EFF
from gpuplan.perf.efficiency import efficiency_for
from gpuplan.perf.gemm_shape import GemmShape, matmul_shape, shape_efficiency
from gpuplan.perf.roofline import gemm_efficiency, launches_kernel, op_time, rate_key, weight_bytes_factor
from gpuplan.trace.records import OpRecord


def _mm(dtype: str, flops: int = 2 * 4096**3, nbytes: int = 3 * 4096**2 * 2) -> OpRecord:
    return OpRecord("aten.mm.default", "forward", "m", "matmul", dtype, flops, nbytes * 2 // 3, nbytes // 3)


def test_fp32_matmul_uses_cuda_cores_unless_tf32() -> None:
    # gpus-notes.md: PyTorch leaves TF32 off for matmuls by default (allow_tf32=False).
    a100 = get_gpu("A100-80GB-SXM")
    assert rate_key(_mm("float32"), "fp32", a100) == ("fp32", False)
    assert rate_key(_mm("float32"), "tf32", a100) == ("tf32", True)
    assert rate_key(_mm("bfloat16"), "amp-bf16", a100) == ("bf16", True)


def _conv(dtype: str = "float32") -> OpRecord:
    return OpRecord("aten.convolution.default", "forward", "c", "conv", dtype, 2 * 10**9, 10**7, 10**7)


def test_fp32_convolutions_run_in_tf32_as_cudnn_defaults() -> None:
    # torch.backends.cudnn.allow_tf32 is True by default (matmul's allow_tf32 is False): an fp32
    # conv on Ampere+ runs on tensor cores in TF32; a V100 has no TF32 and stays on CUDA cores
    assert rate_key(_conv(), "fp32", get_gpu("A100-80GB-SXM")) == ("tf32", True)
    assert rate_key(_conv(), "fp32", get_gpu("V100-SXM2-16GB")) == ("fp32", False)


def test_big_bf16_matmul_is_compute_bound_at_tensor_core_rate() -> None:
    h100 = get_gpu("H100-SXM")
    eff = efficiency_for(h100)
    op = _mm("bfloat16")
    t = op_time(op, h100, "amp-bf16", eff)
    peak = h100.peak_flops_per_s("bf16")
    assert peak is not None and h100.sm_count == 132
    # 4096² output in 256×128 tiles = 512 tiles over 132 SMs: 4 waves, the last 88% full, so
    # 512 / (4 × 132) of the large-GEMM rate (NVIDIA matmul guide, wave quantization)
    assert gemm_efficiency(op, h100, eff) == pytest.approx(512 / 528)
    assert t.compute_bound
    assert t.compute_s == pytest.approx(op.flops / (peak * eff.tensor_core_matmul * 512 / 528))
    assert t.total_s == pytest.approx(t.compute_s + eff.graph_launch_overhead_s)
    assert t.dispatch_s == eff.launch_overhead_s


def test_matmul_shape_is_recovered_from_flops_and_bytes() -> None:
    m, n, k = 1000, 300, 77
    op = OpRecord("aten.mm.default", "forward", "m", "matmul", "float16", 2 * m * n * k, 2 * (m * k + k * n), 2 * m * n)
    shape = matmul_shape(op)
    assert shape is not None
    assert (shape.m, shape.n, shape.k) == pytest.approx((m, n, k))


def test_wave_and_tile_quantization() -> None:
    tiles = ((128, 128, 1.0),)
    # 108 tiles on 108 SMs: one full wave; 109 tiles: a second wave with one tile in it (K = 128
    # is too short to split, so split-K cannot fill the second wave)
    full = shape_efficiency(GemmShape(128 * 108, 128, 128), 108, tiles, 0.0)
    spill = shape_efficiency(GemmShape(128 * 109, 128, 128), 108, tiles, 0.0)
    assert full == pytest.approx(1.0)
    assert spill == pytest.approx(109 / 216)
    # with a long K, split-K fills the slots: 32 slices of K = 128 (the shortest split) make 3488
    # tiles in 33 waves of 108
    assert shape_efficiency(GemmShape(128 * 109, 128, 4096), 108, tiles, 0.0) == pytest.approx(3488 / 3564)
    assert shape_efficiency(GemmShape(128 * 109, 128, 4096), 108, tiles, 0.0, split_k=False) == pytest.approx(109 / 216)
    # a 129-wide output pads to two 128-wide tiles (tile quantization)
    assert shape_efficiency(GemmShape(129, 128 * 54, 4096), 108, tiles, 0.0) == pytest.approx(129 / 256)
    # a short K loop pays its prologue/epilogue: K / (K + k_half), relative to K = 4096
    short = shape_efficiency(GemmShape(128 * 108, 128, 32), 108, tiles, 32.0)
    assert short == pytest.approx(32 / 64 * (1 + 32 / 4096))


def test_elementwise_is_memory_bound() -> None:
    gpu = get_gpu("A100-80GB-SXM")
    op = OpRecord("aten.add.Tensor", "forward", "m", "other", "float32", 0, 8 << 20, 4 << 20)
    t = op_time(op, gpu, "fp32", EFF)
    assert t.compute_s == 0
    assert t.memory_s == pytest.approx((12 << 20) / (gpu.memory_bandwidth_bytes_per_s * EFF.bandwidth))


def test_fitted_elementwise_share_slows_normalizations_not_pointwise_kernels() -> None:
    """Issue 17: the fitted ``elementwise`` share is for softmax / norms / dropout / reductions; a pointwise
    add, a cast and a fused optimizer update stream at the copy bandwidth whatever the share."""
    gpu = get_gpu("A100-80GB-SXM")
    slow = EFF.with_(elementwise=0.5)
    copy_s = (12 << 20) / (gpu.memory_bandwidth_bytes_per_s * EFF.bandwidth)
    for name in ("aten.add.Tensor", "aten._to_copy.default", "aten._fused_adamw_.default", "aten._foreach_mul_.Scalar"):
        op = OpRecord(name, "forward", "m", "other", "float32", 0, 8 << 20, 4 << 20)
        assert op_time(op, gpu, "fp32", slow).memory_s == pytest.approx(copy_s), name
    for name in ("aten._softmax.default", "aten.native_layer_norm.default", "aten.native_dropout.default"):
        op = OpRecord(name, "forward", "m", "other", "float32", 0, 8 << 20, 4 << 20)
        assert op_time(op, gpu, "fp32", slow).memory_s == pytest.approx(copy_s / 0.5), name


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


@settings(max_examples=30, deadline=None)
@given(
    dtype=st.sampled_from(["float32", "float16", "bfloat16"]),
    phase=st.sampled_from(["forward", "backward"]),
    back_fp32=st.floats(0.1, 1.0),
    back_16bit=st.floats(0.1, 1.0),
)
def test_backward_convolutions_take_their_precisions_share(
    dtype: str, phase: str, back_fp32: float, back_16bit: float
) -> None:
    # conv_backward is fitted on the TF32 training row, conv_backward_16bit on the AMP one
    # (calibration.csv lam-rn50-fp32-a100sxm / lam-rn50-amp-8xa100sxm): a backward convolution gets
    # the share of its own precision, a forward one neither
    a100 = get_gpu("A100-80GB-SXM")
    op = OpRecord("aten.convolution_backward.default", phase, "c", "conv", dtype, 2 * 10**9, 10**7, 10**7)
    base = gemm_efficiency(op, a100, EFF.with_(conv_backward=1.0, conv_backward_16bit=1.0))
    got = gemm_efficiency(op, a100, EFF.with_(conv_backward=back_fp32, conv_backward_16bit=back_16bit))
    share = 1.0 if phase == "forward" else back_fp32 if dtype == "float32" else back_16bit
    assert got == pytest.approx(base * share)


@pytest.mark.parametrize("phase", ["forward", "backward"])
def test_backward_convolutions_move_their_layout_transform_bytes(phase: str) -> None:
    # Efficiency.conv_backward_traffic: cuDNN's NCHW<->NHWC transforms around its NHWC tensor-core kernels
    # read and write each tensor again, so a backward convolution's memory time is its traced bytes × the
    # factor at the streaming bandwidth (exact: memory_bound_s of the multiplied bytes); a forward one keeps
    # its traced bytes. On the H100 (989 dense fp16 TFLOP/s for 3.35 TB/s) a 2-GFLOP, 200-MB backward
    # convolution at 4× is bandwidth-bound; its compute time is untouched.
    h100 = get_gpu("H100-SXM")
    eff = efficiency_for(h100).with_(conv_backward_traffic=1.0)
    op = OpRecord("aten.convolution_backward.default", phase, "c", "conv", "float16", 2 * 10**9, 10**8, 10**8)
    one, four = op_time(op, h100, "amp-fp16", eff), op_time(op, h100, "amp-fp16", eff.with_(conv_backward_traffic=4.0))
    assert four.compute_s == one.compute_s
    bandwidth = h100.memory_bandwidth_bytes_per_s * eff.bandwidth
    assert one.memory_s == pytest.approx(2 * 10**8 / bandwidth)
    if phase == "forward":
        assert four.memory_s == one.memory_s
    else:
        assert four.memory_s == pytest.approx(4 * 2 * 10**8 / bandwidth)
        assert not four.compute_bound and four.kernel_s == four.memory_s
