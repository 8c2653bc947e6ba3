"""Efficiency factors of the cost model: the fraction of a datasheet peak that real kernels reach.

Every factor is printed with every result (``Efficiency.describe``). Where a factor was fitted on
the throughput rows of ``shared/reference/calibration.csv`` the fit is
``scripts/calibrate_fit.py`` (residuals in ``docs/accuracy.md``); the others are priors with
their source named here, because no calibration row constrains them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gpuplan.perf.gemm_shape import Tile

# cuBLAS-like candidate tiles (rows, cols, relative speed per FLOP): the big tile is the fastest per
# FLOP, smaller ones fill more SMs; 16 rows is the smallest tensor-core MMA (skinny and decode GEMMs).
# Prior, per the NVIDIA matmul performance guide (gemm_shape.py).
DEFAULT_TILES: tuple[Tile, ...] = (
    (256, 128, 1.0), (128, 128, 0.95), (128, 64, 0.85), (64, 64, 0.7), (16, 128, 0.35),
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Efficiency:
    """Achievable fractions of peak, and fixed per-kernel costs."""

    tensor_core_matmul: float
    """Large matmul on tensor cores (fp16, bf16, tf32): fraction of the dense peak. FITTED per
    generation (scripts/accuracy.py on the public matrices), never above what public GEMM benchmarks
    reach on that generation (``gemm_cap`` in arch_factors.json). A GEMM of a given shape reaches this
    times its shape efficiency (perf/gemm_shape.py)."""
    fp32_matmul: float
    """Plain fp32 matmul/conv on CUDA cores (TF32 off): fraction of the fp32 peak. FITTED, never above
    the largest public cuBLAS SGEMM fraction (``bounds.fp32_matmul`` in arch_factors.json)."""
    attention_fused: float
    """Flash / memory-efficient attention kernels: fraction of the dense tensor-core peak. Prior:
    FlashAttention-2 (Dao 2023, arXiv:2307.08691) reaches 50-73% of A100 peak forward and less
    backward; 0.55 is the middle of that range."""
    bandwidth: float
    """Memory-bound kernels: fraction of the datasheet DRAM bandwidth. Prior: streaming kernels
    reach ~80-90% of HBM peak; gpt-fast (pytorch-labs/gpt-fast README @d2c5d82) measured 1397 GB/s
    for a whole Llama-2-7B decode step on an A100-80GB power-limited to 330 W (it notes ~1700 GB/s
    as the empirical peak there); 0.8 of the datasheet 2039 GB/s is used."""
    launch_overhead_s: float
    """CPU time eager PyTorch spends per kernel (Python + ATen dispatch + cudaLaunchKernel). It runs
    ahead of the GPU, so it shows only where the kernels are shorter (small batches and models):
    eager step = max(sum of GPU kernel times + gaps, sum of dispatch times). FITTED."""
    graph_launch_overhead_s: float
    """GPU-side gap between back-to-back kernels, and the whole per-kernel cost when the loop is
    replayed as a CUDA graph (vLLM, TensorRT-LLM, torch.compile reduce-overhead). Prior: ~1-2 µs
    between kernels of a graph (NVIDIA CUDA graphs blog, 2019)."""
    conv_tensor_core: float = 1.0
    """Convolution (cuDNN implicit GEMM, NCHW as PyTorch defaults: layout transforms included) on
    tensor cores: fraction of the large-GEMM rate, before its shape efficiency. FITTED."""
    conv_backward: float = 1.0
    """Backward convolutions (cuDNN dgrad + wgrad: the weight gradient reduces over N·Ho·Wo, split
    across the SMs with a partial-sum reduction) relative to the forward convolution. FITTED (the
    training CNN row against the inference CNN row)."""
    conv_backward_16bit: float = 1.0
    """Backward fp16/bf16 convolutions relative to the forward convolution, in place of
    ``conv_backward`` (which the TF32 training row fits). FITTED on the one public AMP CNN training
    row (calibration.csv lam-rn50-amp-8xa100sxm: NCHW, 8-GPU DDP); the 16-bit forward rate is the
    inference row's."""
    conv_backward_traffic: float = 1.0
    """DRAM bytes a backward convolution moves per byte of its traced operands (output gradient, input and
    weight read; input and weight gradients written), ≥ 1. cuDNN's tensor-core convolutions compute in NHWC;
    given PyTorch's default NCHW tensors the backward pass runs them behind explicit layout transforms
    (nchwToNhwc / nhwcToNchw kernels, each reading and writing a whole tensor): the data-gradient kernel's
    output gradient in and input gradient out, the weight-gradient kernel's input and output gradient again
    (a separate cuDNN call), and the implicit GEMM re-reads tiles (wgrad's split-K partial sums too): about
    4× the traced bytes by that count. Sources: NVIDIA "Deep Learning Performance: Convolutional Layers
    User's Guide" (Tensor Layouts In Memory: NCHW vs NHWC: Tensor Core kernels use NHWC, NCHW tensors are
    transposed around them); PyTorch's "Channels Last Memory Format" tutorial; MosaicML Composer's
    channels-last method card (NVIDIA's figure: NCHW transposed to NHWC before the convolution and back
    after; ResNet-50 ~30% faster in NHWC on V100/A100). A backward convolution's memory time is its traced
    bytes × this at the streaming bandwidth: bandwidth-bound where its FLOPs are cheap for the GPU's
    bandwidth (H100), compute-bound where they are dear (Volta fp32). Forward convolutions keep their traced
    bytes: a forward transform cost is not in the data (fitted at 2-3× it puts the public timm NCHW
    inference rows 10-30% slow). FITTED (scripts/calibrate_fit.py, profiled over its grid)."""
    elementwise: float = 1.0
    """Memory-bound kernels that are neither GEMMs nor pointwise (softmax, layer/batch/group norms,
    dropout, reductions, pooling, losses, as eager PyTorch launches them): share of ``bandwidth`` (what a
    streaming copy reaches) they reach. FITTED per generation (scripts/accuracy.py on the public
    matrices); never above 1, the streaming rate. Row-wise reductions over short rows, dropout's random
    numbers and the two-pass backward of normalizations read and write at less than a copy does.
    Pointwise kernels (adds, casts, activations) and fused optimizer updates stream at ``bandwidth``
    itself (perf/roofline.STREAMING_OPS)."""
    tiles: tuple[Tile, ...] = DEFAULT_TILES
    """Candidate GEMM tiles of this architecture (gemm_shape.shape_efficiency)."""
    gemm_k_half: float = 32.0
    """K-loop prologue/epilogue cost in K elements (gemm_shape.shape_efficiency). FITTED."""
    arch: str = "ampere"
    """Architecture key of perf/data/arch_factors.json these factors belong to."""
    fitted_on: tuple[str, ...] = ()
    """calibration.csv row ids the FITTED factors came from."""

    def with_(self, **changes: Any) -> Efficiency:
        return replace(self, **changes)

    def describe(self) -> tuple[str, ...]:
        fitted = ", ".join(self.fitted_on) or "none"
        return (
            f"efficiency ({self.arch}): large tensor-core GEMM {self.tensor_core_matmul:.0%} of dense peak "
            f"× shape (tile/wave quantization, K loop), convolutions {self.conv_tensor_core:.0%} of that "
            f"(backward {self.conv_backward:.0%} of forward, {self.conv_backward_16bit:.0%} in fp16/bf16"
            + (f"; backward ones move {self.conv_backward_traffic:.2g}× their operand bytes: NCHW↔NHWC transforms"
               if self.conv_backward_traffic > 1.0 else "") + "), "
            f"fp32 CUDA-core matmul {self.fp32_matmul:.0%} of fp32 peak (fitted on {fitted})",
            f"efficiency: fused attention {self.attention_fused:.0%} of peak, memory-bound ops at "
            f"{self.bandwidth:.0%} of DRAM bandwidth (priors for {self.arch}, sources in perf/data/arch_factors.json)"
            + (f", eager elementwise/normalization kernels at {self.elementwise:.0%} of that (fitted)"
               if self.elementwise < 1.0 else ""),
            f"eager dispatch {self.launch_overhead_s * 1e6:.1f} µs CPU per kernel (fitted; shows when kernels are "
            f"shorter); {self.graph_launch_overhead_s * 1e6:.1f} µs GPU gap per kernel (prior)",
        )


# The per-architecture factors are data (perf/data/arch_factors.json, written by
# scripts/calibrate_fit.py); perf/arch.py builds them. DEFAULT_EFFICIENCY is Ampere's, kept for
# callers that name no GPU architecture.

FACTORS_FILE = Path(__file__).with_name("data") / "arch_factors.json"

# catalog ``arch`` text (lower case, first match wins) -> architecture key of the factors file
_ARCH_KEYS: tuple[tuple[str, str], ...] = (
    ("volta", "volta"),
    ("turing", "turing"),
    ("ampere", "ampere"),
    ("ada", "ada"),
    ("hopper", "hopper"),
    ("gb20x", "blackwell-gb20x"),  # before "blackwell": sm_120 runs mma.sync kernels, not tcgen05
    ("blackwell", "blackwell"),
    ("cdna", "cdna"),
)


def load_factors(path: Path = FACTORS_FILE) -> dict[str, Any]:
    """The factors file as data (schema in its ``about`` field)."""
    with path.open(encoding="utf-8") as f:
        data: dict[str, Any] = json.load(f)
    return data


def build_efficiencies(data: dict[str, Any]) -> dict[str, Efficiency]:
    """One Efficiency per architecture: the shared fitted values × the architecture's own priors."""
    fitted = data["fitted"]
    # no factor above what public GEMM benchmarks reach (bounds / gemm_cap, sourced in the file)
    fp32_cap = float(data.get("bounds", {}).get("fp32_matmul", 1.0))
    out: dict[str, Efficiency] = {}
    for key, a in data["architectures"].items():
        # a generation's own fit (scripts/accuracy.py on the public matrices) overrides the shared one;
        # its large-GEMM fraction never exceeds what public GEMM benchmarks reach on it (gemm_cap)
        own = {**fitted, **a.get("fitted", {})}
        tensor_core = own["tensor_core_matmul"] if "fitted" in a else fitted["tensor_core_matmul"] * a["gemm_scale"]
        out[key] = Efficiency(
            tensor_core_matmul=min(float(a.get("gemm_cap", 1.0)), tensor_core),
            conv_tensor_core=own["conv_tensor_core"],
            conv_backward=float(own.get("conv_backward", 1.0)),
            conv_backward_16bit=float(own.get("conv_backward_16bit", own.get("conv_backward", 1.0))),
            conv_backward_traffic=max(1.0, float(own.get("conv_backward_traffic", 1.0))),
            elementwise=min(1.0, float(own.get("elementwise", 1.0))),
            fp32_matmul=min(fp32_cap, own["fp32_matmul"]),
            attention_fused=a["attention_fused"],
            bandwidth=a["bandwidth"],
            launch_overhead_s=fitted["launch_overhead_s"],
            graph_launch_overhead_s=a["graph_launch_overhead_s"],
            tiles=tuple((int(t[0]), int(t[1]), float(t[2])) for t in a["tiles"]),
            gemm_k_half=float(fitted.get("gemm_k_half", a.get("gemm_k_half", 32.0))),
            arch=key,
            fitted_on=tuple(fitted["fitted_on"]),
        )
    return out


ARCH_EFFICIENCY: dict[str, Efficiency] = build_efficiencies(load_factors())
DEFAULT_EFFICIENCY: Efficiency = ARCH_EFFICIENCY["ampere"]


def arch_key(arch: str | Any) -> str:
    """Factors-file key of a catalog GPU (or its ``arch`` text); GPUs of other families (Pascal, Apple,
    Gaudi, RDNA) use Ampere's factors, stated in the assumptions as that architecture. Given the GPU,
    GeForce/workstation Ampere (GA10x: compute capability 8.6/8.7, the catalog's ``arch`` says only
    "Ampere") is ``ampere-ga10x`` once the factors file has that key (a per-generation fit that
    ships it): its SMs and memory system are not the A100's GA100."""
    if not isinstance(arch, str):
        cc = getattr(arch, "compute_capability", None)
        text = str(getattr(arch, "arch", "") or "")
        if "ampere" in text.lower() and cc is not None and tuple(cc) >= (8, 6) and "ampere-ga10x" in ARCH_EFFICIENCY:
            return "ampere-ga10x"
        arch = text
    low = arch.lower()
    for needle, key in _ARCH_KEYS:
        if needle in low:
            return key
    return "ampere"


def generation_key(gpu: str | Any) -> str:
    """The GPU generation a time's 80% interval is looked up under (perf/uncertainty): ``arch_key`` where the
    catalog ``arch`` is a generation the factors file knows; else that generation's own name, lower case
    (``pascal``, ``rdna 3``, ``gaudi 2``, ``apple silicon m3``), which no public row measures, so the
    interval says so and widens rather than borrowing the factors' stand-in generation's name."""
    text = gpu if isinstance(gpu, str) else str(getattr(gpu, "arch", "") or "")
    low = text.lower()
    if any(needle in low for needle, _ in _ARCH_KEYS):
        return arch_key(gpu)
    return low.split(" + ")[0].strip() or "unknown"


def efficiency_for(arch: str | Any) -> Efficiency:
    """The efficiency factors of a catalog GPU (or of its ``GPU.arch`` text: then GA10x reads as Ampere)."""
    return ARCH_EFFICIENCY.get(arch_key(arch), DEFAULT_EFFICIENCY)
