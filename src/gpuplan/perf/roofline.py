"""Time of one traced op on one GPU: the larger of its compute and memory time, plus launch cost.

Which peak an op may use follows what PyTorch does on CUDA:

* matmul / conv / attention in fp16 or bf16 run on tensor cores at the dense FP32-accumulate rate
  (``GPU.peak_tflops`` already gives GeForce cards their half-rate FP32-accumulate figure);
* fp32 matmuls use the plain fp32 (CUDA-core) rate unless the workload enables TF32
  (``precision="tf32"``): ``torch.backends.cuda.matmul.allow_tf32`` is False by default;
  fp32 convolutions run in TF32 on GPUs that have it: ``torch.backends.cudnn.allow_tf32`` is True
  by default;
* a backward convolution moves ``Efficiency.conv_backward_traffic`` × its operand bytes (cuDNN's
  NCHW↔NHWC transforms around its NHWC tensor-core kernels, tile re-reads), so it is bandwidth-bound
  where the GPU's peak is high for its bandwidth;
* a matmul or convolution reaches the large-GEMM fraction of its peak times its shape efficiency
  (tile and wave quantization over the SMs, the K loop: perf/gemm_shape.py); a GPU the catalog
  gives no SM count is charged the widest counted GPU's waves (never rewarded for the gap);
* every other op (elementwise, norms, softmax, reductions, optimizer updates) is memory-bound:
  its bytes read and written over the achievable bandwidth;
* flash / memory-efficient attention are fused kernels: their FLOPs at the fused-attention
  efficiency, their bytes = their inputs and outputs only (the S×S scores never reach DRAM).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from gpuplan.errors import ConfigError
from gpuplan.memory.weight_quant import WEIGHT_QUANT_BITS as WEIGHT_QUANT_BITS  # re-exported for callers
from gpuplan.memory.weight_quant import bits_per_weight
from gpuplan.perf.efficiency import Efficiency
from gpuplan.perf.gemm_shape import GemmShape, conv_shape, matmul_shape, shape_efficiency
from gpuplan.scaled_formats import SCALED_FORMATS

if TYPE_CHECKING:
    from gpuplan.hardware import GPU
    from gpuplan.trace.records import OpRecord

# Ops a trace records that launch no GPU kernel: allocation only, metadata, host-side scalars
# (Adam's step counters live on the CPU unless capturable/fused), profiler markers.
NON_KERNEL_OPS: frozenset[str] = frozenset(
    {
        "device",
        "_local_scalar_dense",
        "_record_function_enter_new",
        "_record_function_exit",
        "empty",
        "empty_like",
        "empty_strided",
        "new_empty",
        "new_empty_strided",
        "_unsafe_view",
        "resize_",
        "set_",
        "lift_fresh_copy",
        "item",
        "is_nonzero",
        "sym_numel",
        "_assert_async",
        "_has_compatible_shallow_copy_type",
        "_reshape_alias",
        "as_strided_",
        "unsqueeze_",
        "squeeze_",
        "t_",
        "transpose_",
        "_version",
    }
)
TENSOR_OP_CLASSES: frozenset[str] = frozenset({"matmul", "conv", "attention"})
# Gathers read only the rows they return (an embedding lookup does not stream the whole table),
# so they are costed as reading what they write, plus the indices.
GATHER_OPS: frozenset[str] = frozenset({"embedding", "index_select", "gather", "take"})

# Pointwise kernels (one read and one write per element, PyTorch's vectorized TensorIterator loops) and
# the fused multi-tensor optimizer updates stream at what a copy reaches (``Efficiency.bandwidth``).
# The other memory-bound kernels (softmax, norms, batch norm, dropout with its random numbers,
# reductions, pooling, losses, embedding backward) read and write at less: two passes, row-wise
# reductions over short rows, Philox generation; the fitted ``Efficiency.elementwise`` share is theirs
# alone. Splitting them keeps the fitted share from taxing the casts and adds of an LLM step (issue 17:
# one share over both pulled the single-GPU LLM rows 10-20% slow once it was fitted on CNN and BERT rows).
STREAMING_OPS: frozenset[str] = frozenset(
    {
        "add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "neg", "pow", "sqrt", "rsqrt", "exp",
        "_to_copy", "copy_", "clone", "cat", "stack", "constant_pad_nd", "roll", "where", "masked_fill",
        "masked_fill_", "fill_", "zero_", "ones_like", "zeros_like", "new_zeros", "slice_backward",
        "select_backward", "relu", "relu_", "threshold_backward", "gelu", "gelu_backward", "silu", "silu_",
        "silu_backward", "tanh", "tanh_backward", "sigmoid", "sigmoid_backward", "hardswish", "hardswish_",
        "hardswish_backward", "hardsigmoid", "hardsigmoid_", "hardsigmoid_backward", "addcmul_", "addcdiv_",
        "lerp_", "_fused_adam_", "_fused_adamw_", "_fused_sgd_",
    }
)


def streams_at_copy_rate(op: OpRecord) -> bool:
    """Whether a memory-bound op is a pointwise / fused-optimizer kernel that runs at the streaming
    bandwidth (not divided by the fitted ``elementwise`` share); ``_foreach_*`` ops are."""
    name = short_name(op.name)
    return name in STREAMING_OPS or name.startswith("_foreach_")


_DTYPE_RATE = {
    "float16": "fp16",
    "bfloat16": "bf16",
    "float32": "fp32",
    "float64": "fp32",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
    "int8": "int8",
}
_HALF_DTYPES: frozenset[str] = frozenset({"float16", "bfloat16"})

def short_name(op_name: str) -> str:
    """``aten.mm.default`` -> ``mm``."""
    parts = op_name.split(".")
    return parts[1] if len(parts) >= 2 else op_name


def launches_kernel(op: OpRecord) -> bool:
    if short_name(op.name) in NON_KERNEL_OPS:
        return False
    return op.flops > 0 or op.bytes_read + op.bytes_written > 0


class NoRateError(ConfigError):
    """The catalog documents no rate this op could run at on the GPU (its time cannot be modelled)."""


def rate_key(op: OpRecord, precision: str, gpu: GPU) -> tuple[str, bool]:
    """(catalog dtype key whose peak bounds this op, runs on tensor cores?).

    A half-precision op on a GPU with no documented rate for its dtype falls back to the fp32 rate
    (CUDA cores), then to the other half type; fp32 work never borrows a tensor-core rate. No usable
    rate at all is a NoRateError."""
    base = _DTYPE_RATE.get(op.dtype, "fp32")
    if base == "fp8" and precision in SCALED_FORMATS:
        base = SCALED_FORMATS[precision].gemm_rate  # the recipe's GEMMs, traced as torchao float8's
    # torch: matmul TF32 off by default (allow_tf32 False), cuDNN convolutions TF32 on by default
    tf32 = precision == "tf32" or op.op_class == "conv"
    if op.dtype == "float32" and tf32 and gpu.peak_tflops("tf32"):
        base = "tf32"
    if gpu.peak_tflops(base):
        return base, base != "fp32"
    if base != "fp32" and gpu.peak_tflops("fp32"):
        return "fp32", False  # e.g. fp16 on a pre-Volta GPU: CUDA cores
    for other in ("bf16", "fp16"):
        if base in ("bf16", "fp16") and gpu.peak_tflops(other):
            return other, True
    raise NoRateError(
        f"{gpu.id} has no documented {base} rate in the catalog: its step time cannot be modelled"
    )


def compute_dtype_key(precision: str) -> str:
    """The catalog rate MFU is measured against for a workload precision."""
    return {
        "fp32": "fp32",
        "tf32": "tf32",
        "amp-bf16": "bf16",
        "bf16": "bf16",
        "amp-fp16": "fp16",
        "fp16": "fp16",
        # torchtitan quotes float8 (and MX) training MFU against the bf16 peak; the GEMMs run at their own rates
        "fp8": "bf16",
        "mxfp8": "bf16",
        "nvfp4": "bf16",
    }[precision]


def weight_bytes_factor(weight_quant: str) -> float:
    """Bytes of a quantized weight relative to 16-bit, group scales included: the layout the memory
    total counts (gpuplan.memory.weight_quant), so time and memory read the same weights."""
    return bits_per_weight(weight_quant) / 16.0


@dataclass(frozen=True, slots=True)
class OpTime:
    compute_s: float
    memory_s: float
    overhead_s: float
    """GPU-side gap before the kernel (launch latency between back-to-back kernels)."""
    dispatch_s: float = 0.0
    """CPU time to dispatch the kernel in eager mode; runs ahead of the GPU (see step_time)."""

    @property
    def kernel_s(self) -> float:
        return max(self.compute_s, self.memory_s)

    @property
    def total_s(self) -> float:
        """GPU time of the op: kernel + gap."""
        return self.kernel_s + self.overhead_s

    @property
    def compute_bound(self) -> bool:
        return self.compute_s >= self.memory_s


def memory_bound_s(moved_bytes: float, gpu: GPU, eff: Efficiency) -> float:
    """Kernel time of a memory-bound op moving ``moved_bytes`` (read + written) on ``gpu``: the one
    bandwidth rule (also what the planner charges FSDP2's copies of gathered parameters)."""
    return moved_bytes / (gpu.memory_bandwidth_bytes_per_s * eff.bandwidth)


def op_time(
    op: OpRecord,
    gpu: GPU,
    precision: str,
    eff: Efficiency,
    *,
    graph: bool = False,
    weight_quant: str = "none",
) -> OpTime:
    """Time of one execution of ``op`` (multiply by ``op.count`` for the step)."""
    if not launches_kernel(op):
        return OpTime(0.0, 0.0, 0.0)
    moved = float(op.bytes_read + op.bytes_written)
    name = short_name(op.name)
    if name in GATHER_OPS:
        moved = 2.0 * op.bytes_written
    elif graph and name == "cat":
        # decode with a preallocated (static or paged) KV cache, as serving engines run it: appending
        # one token writes a few KiB per layer instead of copying the cache as HF's DynamicCache does;
        # the trace's totals cannot tell the new slice from the old, so only the launch is counted
        moved = 0.0
    if weight_quant != "none" and op.op_class == "matmul" and op.dtype in ("float16", "bfloat16"):
        # Weight-only quantization: the weight is most of what a decode GEMV reads; the activations
        # in and out are about the same size, so weight bytes ≈ read − written.
        weight = max(0, op.bytes_read - op.bytes_written)
        moved -= weight * (1.0 - weight_bytes_factor(weight_quant))
    if op.op_class == "conv" and op.phase == "backward":
        moved *= eff.conv_backward_traffic  # cuDNN's NCHW<->NHWC transforms, tile re-reads (Efficiency docstring)
    memory_s = memory_bound_s(moved, gpu, eff)
    if op.op_class == "other" and not streams_at_copy_rate(op):
        memory_s /= eff.elementwise  # eager normalization/reduction/dropout kernels: below a streaming copy
    compute_s = 0.0
    if op.flops > 0:
        key, tensor = rate_key(op, precision, gpu)
        peak = gpu.peak_flops_per_s(key) or 0.0
        if op.op_class == "attention":
            fraction = eff.attention_fused if tensor else eff.fp32_matmul
        elif op.op_class in ("matmul", "conv"):
            fraction = (eff.tensor_core_matmul if tensor else eff.fp32_matmul) * gemm_efficiency(op, gpu, eff)
        else:
            fraction = eff.bandwidth  # the rare 'other' op with a FLOP formula: plain ALU work
        compute_s = op.flops / (peak * fraction) if peak > 0 and fraction > 0 else 0.0
    return OpTime(compute_s, memory_s, eff.graph_launch_overhead_s, 0.0 if graph else eff.launch_overhead_s)


@lru_cache(maxsize=1)
def widest_sm_count() -> int:
    """The most SMs (AMD: compute units) of any catalog GPU that has a count: what a GPU without
    one (Apple silicon, Gaudi) is charged, the worst case for wave quantization, so that a missing
    count never makes a GPU look faster than a counted one."""
    from gpuplan.hardware import all_gpus

    return max(g.sm_count for g in all_gpus() if g.sm_count)


def gemm_efficiency(op: OpRecord, gpu: GPU, eff: Efficiency) -> float:
    """Fraction of the large-GEMM rate this matmul or convolution reaches: its shape's tile and wave
    quantization over the GPU's SMs (the catalog's widest count where it has none) and K loop;
    convolutions also at the cuDNN conv fraction (backward ones at their own share of it)."""
    shape: GemmShape | None = conv_shape(op) if op.op_class == "conv" else matmul_shape(op)
    if shape is None:
        return 1.0
    sms = gpu.sm_count or widest_sm_count()
    if op.op_class == "conv":
        backward = 1.0
        if op.phase == "backward":
            backward = eff.conv_backward_16bit if op.dtype in _HALF_DTYPES else eff.conv_backward
        return shape_efficiency(shape, sms, eff.tiles, eff.gemm_k_half) * eff.conv_tensor_core * backward
    return shape_efficiency(shape, sms, eff.tiles, eff.gemm_k_half)
