"""Per-op roofline: which peak an op gets, the GEMM shape efficiency (tile and wave quantization,
K loop), and that the time is max(compute, memory) + the GPU gap between kernels."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.hardware import get_gpu
from gpuplan.perf.efficiency import DEFAULT_EFFICIENCY as EFF
from gpuplan.perf.efficiency import efficiency_for
from gpuplan.perf.gemm_shape import GemmShape, conv_shape, matmul_shape, shape_efficiency
from gpuplan.perf.roofline import (
    MMA_SYNC_FLOPS_PER_SM_CLOCK,
    REFERENCE_MMA_FLOPS_PER_SM_CLOCK,
    TF32_FLOPS_PER_SM_CLOCK,
    gemm_efficiency,
    launches_kernel,
    mma_flops_per_sm_clock,
    op_time,
    rate_key,
    weight_bytes_factor,
)
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
    # (the 16-bit share's per-SM-clock scale is in both: test_16bit_backward_convolutions_run_at_a_rate_per_sm_clock)
    share = 1.0 if phase == "forward" else back_fp32 if dtype == "float32" else back_16bit
    assert got == pytest.approx(base * share)


@pytest.mark.parametrize(("gpu", "per_sm_clock"), [
    # NVIDIA whitepapers, dense fp16 tensor FLOPs per SM per clock with FP32 accumulate: Volta (V100) 8 tensor cores
    # x 64 FMA; Turing (Quadro RTX 8000: full-rate FP32 accumulate) 8 x 64; GA100 (A100) 4 x 256; GA10x (RTX A6000,
    # A10) 4 x 128 and Ada (RTX 6000 Ada) the same; GeForce GA102 / AD102 (RTX 3090, RTX 4090) FP32 accumulate at
    # half the FP16-accumulate rate (GA102 whitepaper App. A: 3090 71 vs 142 TFLOPS; Ada whitepaper: 4090 165.2 vs
    # 330.3); Hopper (H100 SXM) 4 x 512. The catalog's peak / (SMs x boost clock) must give them back.
    ("V100-SXM2-16GB", 1024), ("Quadro-RTX-8000", 1024), ("A100-80GB-SXM", 2048), ("RTX-A6000", 1024),
    ("A10", 1024), ("RTX-6000-Ada", 1024), ("RTX-3090", 512), ("RTX-4090", 512), ("H100-SXM", 4096),
])
def test_catalog_rates_give_the_whitepapers_mma_rate_per_sm_clock(gpu: str, per_sm_clock: int) -> None:
    assert mma_flops_per_sm_clock(get_gpu(gpu), "fp16") == pytest.approx(per_sm_clock, rel=0.01)


def test_a_gpu_without_a_clock_is_charged_its_generations_highest_sm_rate() -> None:
    # H100 PCIe and H200 SXM state no boost clock in the catalog: the H100 SXM's 4096 (Hopper's), never less
    for gpu in ("H100-PCIe", "H200-SXM"):
        assert get_gpu(gpu).boost_clock_mhz is None
        assert mma_flops_per_sm_clock(get_gpu(gpu), "bf16") == pytest.approx(
            mma_flops_per_sm_clock(get_gpu("H100-SXM"), "bf16"))


def _bwd_conv(dtype: str) -> OpRecord:
    return OpRecord("aten.convolution_backward.default", "backward", "c", "conv", dtype, 2 * 10**10, 10**7, 10**7)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16bit_backward_convolutions_run_at_a_rate_per_sm_clock(dtype: str) -> None:
    # Efficiency.conv_backward_16bit: cuDNN's 16-bit dgrad/wgrad sustain FLOPs per SM per clock that do not grow with
    # the SM's MMA rate (the public ResNet-50 AMP rows of V100, Quadro RTX 8000, A100 and RTX 3090 put them at one
    # value, docs/accuracy.md "16-bit backward convolutions run per SM per clock"). Relative to the same forward
    # convolution (same shape efficiency), the backward share times the SM's MMA rate is the same on every GPU.
    eff = EFF.with_(conv_backward_16bit=0.5)
    fwd = OpRecord("aten.convolution.default", "forward", "c", "conv", dtype, 2 * 10**10, 10**7, 10**7)
    key = "bf16" if dtype == "bfloat16" else "fp16"
    per_clock = {}
    for name in ("V100-SXM2-16GB", "Quadro-RTX-8000", "A100-80GB-SXM", "RTX-3090", "RTX-A6000", "RTX-4090",
                 "RTX-6000-Ada"):
        gpu = get_gpu(name)
        if not gpu.peak_tflops(key):
            continue  # V100 has no bf16
        share = gemm_efficiency(_bwd_conv(dtype), gpu, eff) / gemm_efficiency(fwd, gpu, eff)
        per_clock[name] = share * mma_flops_per_sm_clock(gpu, key)
    assert len(per_clock) >= 5
    for name, value in per_clock.items():
        assert value == pytest.approx(0.5 * REFERENCE_MMA_FLOPS_PER_SM_CLOCK, rel=0.01), name
    # so a GeForce GA102 (FP32 accumulate at half rate) takes 4x the A100's share of its own peak
    three, a100 = get_gpu("RTX-3090"), get_gpu("A100-80GB-SXM")
    ratio = (gemm_efficiency(_bwd_conv(dtype), three, eff) / gemm_efficiency(fwd, three, eff)) / (
        gemm_efficiency(_bwd_conv(dtype), a100, eff) / gemm_efficiency(fwd, a100, eff))
    assert ratio == pytest.approx(4.0, rel=0.01)


def test_wgmma_sms_keep_the_a100s_share_of_their_peak() -> None:
    # MMA_SYNC_FLOPS_PER_SM_CLOCK: Hopper's SM issues 4096 per clock through wgmma/TMA, where the per-SM-clock rule
    # was not measured (its public AMP rows lie between the two readings): its 16-bit backward share of the peak is
    # the A100's, never less
    eff = EFF.with_(conv_backward_16bit=0.5)
    fwd = OpRecord("aten.convolution.default", "forward", "c", "conv", "bfloat16", 2 * 10**10, 10**7, 10**7)
    shares = {}
    for name in ("A100-80GB-SXM", "H100-SXM", "H200-SXM", "B200"):
        gpu = get_gpu(name)
        shares[name] = gemm_efficiency(_bwd_conv("bfloat16"), gpu, eff) / gemm_efficiency(fwd, gpu, eff)
    assert mma_flops_per_sm_clock(get_gpu("H100-SXM"), "bf16") > MMA_SYNC_FLOPS_PER_SM_CLOCK
    a100_share = 0.5 * REFERENCE_MMA_FLOPS_PER_SM_CLOCK / MMA_SYNC_FLOPS_PER_SM_CLOCK
    for name, share in shares.items():
        assert share == pytest.approx(a100_share, rel=0.01), name


def test_fp16_convolutions_get_the_fp32_accumulate_rate() -> None:
    # PyTorch asks cuDNN for FP32 accumulation in fp16/bf16 convolutions: the convolution descriptor's compute type
    # is CUDNN_DATA_FLOAT for half (aten/src/ATen/cudnn/Descriptors.h ConvolutionDescriptor::set: "if (dataType ==
    # CUDNN_DATA_HALF) mathType = CUDNN_DATA_FLOAT"; cuDNN v8 API: aten/src/ATen/native/cudnn/Conv_v8.cpp
    # getConvDescriptor sets CUDNN_DATA_FLOAT for kHalf / kBFloat16), and cuDNN's kernels say so in their names
    # (sm86_xmma_fprop_implicit_gemm_f16f16_f16f32_f32: f32 accumulator). A GeForce GA102 runs that at half its
    # FP16-accumulate rate (RTX 3090: 71 of 142 TFLOPS); the workstation RTX A6000 at full rate (154.8).
    fp16 = OpRecord("aten.convolution.default", "forward", "c", "conv", "float16", 2 * 10**9, 10**7, 10**7)
    three, a6000 = get_gpu("RTX-3090"), get_gpu("RTX-A6000")
    assert rate_key(fp16, "amp-fp16", three) == ("fp16", True)
    assert three.peak_tflops("fp16") == pytest.approx(three.fp16_fp16acc_tflops / 2)
    assert a6000.peak_tflops("fp16") == pytest.approx(154.8) and not a6000.fp32_accumulate_half_rate


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


@pytest.mark.parametrize("phase", ["forward", "backward"])
def test_cuda_core_convolutions_take_neither_tensor_core_conv_factor(phase: str) -> None:
    # A V100 has no TF32 (Volta whitepaper; catalog tf32 blank), so PyTorch's fp32 convolutions run there in cuDNN's
    # FFMA kernels on CUDA cores, which take PyTorch's NCHW tensors as they are: NVIDIA's "Convolutional Layers User's
    # Guide" (Tensor Layouts In Memory) puts the NHWC layout and the NCHW<->NHWC transposes on the Tensor Core path
    # only. Such a convolution runs at the CUDA-core fraction × its shape efficiency, and a backward one moves its
    # traced bytes: conv_tensor_core, conv_backward and conv_backward_traffic are tensor-core factors.
    v100, a100 = get_gpu("V100-SXM2-16GB"), get_gpu("A100-80GB-SXM")
    eff = efficiency_for(v100).with_(conv_tensor_core=0.5, conv_backward=0.8, conv_backward_traffic=4.0)
    op = OpRecord("aten.convolution_backward.default" if phase == "backward" else "aten.convolution.default",
                  phase, "c", "conv", "float32", 2 * 10**10, 10**8, 10**8)
    assert rate_key(op, "fp32", v100) == ("fp32", False)
    shape = conv_shape(op)
    assert shape is not None
    fraction = eff.fp32_matmul * shape_efficiency(shape, v100.sm_count, eff.tiles, eff.gemm_k_half)
    t = op_time(op, v100, "fp32", eff)
    assert t.compute_s == pytest.approx(2 * 10**10 / (v100.peak_flops_per_s("fp32") * fraction))
    assert t.memory_s == pytest.approx(2 * 10**8 / (v100.memory_bandwidth_bytes_per_s * eff.bandwidth))
    # the same fp32 convolution on an A100 runs in TF32 on tensor cores and keeps them (an A100 SM issues
    # TF32_FLOPS_PER_SM_CLOCK: its backward share is conv_backward itself)
    share = 0.8 if phase == "backward" else 1.0
    a_eff = efficiency_for(a100).with_(conv_tensor_core=0.5, conv_backward=0.8, conv_backward_traffic=4.0)
    on_a100 = op_time(op, a100, "fp32", a_eff)
    tc = a_eff.tensor_core_matmul * shape_efficiency(shape, a100.sm_count, a_eff.tiles, a_eff.gemm_k_half) * 0.5 * share
    assert on_a100.compute_s == pytest.approx(2 * 10**10 / (a100.peak_flops_per_s("tf32") * tc), rel=1e-3)
    traffic = 4.0 if phase == "backward" else 1.0
    assert on_a100.memory_s == pytest.approx(
        traffic * 2 * 10**8 / (a100.memory_bandwidth_bytes_per_s * a_eff.bandwidth))


def test_tf32_backward_convolutions_run_at_a_rate_per_sm_clock() -> None:
    # Efficiency.conv_backward is the TF32 backward convolutions' share on an SM issuing the A100's 1024 dense TF32
    # FLOPs per clock (A100 whitepaper: 156 TFLOP/s, 108 SMs, 1410 MHz); a GeForce GA102 / AD102 SM issues 256 (RTX 3090
    # 35.6 TFLOP/s, RTX 4090 82.6: GA102 whitepaper App. A, Ada whitepaper), a workstation one 512 (RTX A6000 77.4), so
    # relative to the same forward convolution the share × the SM's TF32 rate per clock is one number on each GPU.
    # PyTorch runs fp32 convolutions in TF32 by default (torch.backends.cudnn.allow_tf32 True).
    eff = EFF.with_(conv_backward=0.5)
    fwd = OpRecord("aten.convolution.default", "forward", "c", "conv", "float32", 2 * 10**10, 10**7, 10**7)
    expected = {"A100-80GB-SXM": 1024, "RTX-3090": 256, "RTX-4090": 256, "RTX-A6000": 512, "RTX-6000-Ada": 512}
    for name, per_clock in expected.items():
        gpu = get_gpu(name)
        assert rate_key(fwd, "fp32", gpu) == ("tf32", True)
        assert mma_flops_per_sm_clock(gpu, "tf32") == pytest.approx(per_clock, rel=0.01), name
        share = gemm_efficiency(_bwd_conv("float32"), gpu, eff) / gemm_efficiency(fwd, gpu, eff)
        assert share * mma_flops_per_sm_clock(gpu, "tf32") == pytest.approx(0.5 * TF32_FLOPS_PER_SM_CLOCK, rel=1e-9)
