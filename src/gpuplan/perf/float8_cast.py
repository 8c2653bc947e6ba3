"""FP8 training casts (``--precision fp8``) costed as torch.compile runs them.

torchao's float8 training scales each tensor it feeds a ``_scaled_mm`` by its dynamic amax: in eager
PyTorch that is one kernel per step of the formula (``abs``, ``max``, an upcast to fp32, the scale
multiply, ``clamp``, the cast to fp8, plus scalar ops on the scale), about 33 bytes of DRAM traffic
per bf16 element. That is what the trace records, and costing it as recorded made fp8 training ~40%
slower than bf16 (issue 17). torchao and torchtitan do not run it so: torchtitan's float8 docs
(pytorch/torchtitan docs/float8.md) list ``--compile.enable`` as required because it "fuses float8
scaling/casting kernels", and torchao's training docs (docs.pytorch.org/ao/stable/workflows/training.html)
quote their speedups "with torch.compile on" (1.25× at 8 GPU / 8B; torchtitan docs/performance.md
Table 1: Llama 3.1 8B on 8 H100, 6,667 → 8,532 tokens/s/GPU, +28%). Compiled, one cast is two
kernels: the amax reduction reads the high-precision tensor once, and the fused scale+clamp+cast
reads it again and writes one byte per element.

The cast chain is recognised in the trace, not re-derived: inside a module that ran an fp8 GEMM
(a ``Float8Linear``), each ``abs`` starts one cast (torchao ``tensor_to_amax``: ``max(abs(x))``),
and the chain's other ops (the amax reduction to a scalar, every fp32/fp64 op, the upcast to fp32)
are folded into those two kernels. Other ops the module runs (autograd's elementwise ops of the
surrounding program) are costed as usual.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuplan.dtypes import DTYPE_BYTES
from gpuplan.perf.roofline import OpTime, short_name

if TYPE_CHECKING:
    from collections.abc import Iterable

    from gpuplan.hardware import GPU
    from gpuplan.perf.efficiency import Efficiency
    from gpuplan.trace.records import OpRecord

FP8_DTYPES: frozenset[str] = frozenset({"float8_e4m3fn", "float8_e5m2"})
CAST_KERNELS = 2
"""Kernels of one compiled cast: the amax reduction and the fused scale + clamp + cast."""
_WIDE_DTYPES: frozenset[str] = frozenset({"float32", "float64"})


def float8_modules(ops: Iterable[OpRecord]) -> frozenset[tuple[str, str | None]]:
    """(module, block) of every module that ran a GEMM in fp8 (torchao ``Float8Linear``)."""
    return frozenset((op.module, op.block) for op in ops
                     if op.op_class == "matmul" and op.dtype in FP8_DTYPES and op.module)


def _in_cast_chain(op: OpRecord) -> bool:
    name = short_name(op.name)
    if name in ("abs", "max", "amax"):
        return name == "abs" or op.bytes_written <= 8  # the amax reduction to one (or a few) values
    if op.dtype in _WIDE_DTYPES:
        return True  # the fp32 scale multiply, clamp, cast to fp8, and scalar ops on the scale
    # the upcast of the bf16 input (and of its amax) to fp32/fp64 before scaling
    return name == "_to_copy" and op.bytes_written >= 2 * op.bytes_read


def cast_op_time(op: OpRecord, modules: frozenset[tuple[str, str | None]], gpu: GPU,
                 eff: Efficiency, bytes_per_element: float = 1.0) -> OpTime | None:
    """The compiled time of ``op`` when it belongs to an fp8 cast chain, else None (cost it as usual).

    The chain's ``abs`` carries the whole cast: the high-precision tensor read twice (amax, cast)
    and ``bytes_per_element`` written (the recipe's data and scales: gpuplan.scaled_formats), two kernels;
    the chain's other ops cost nothing."""
    if (op.module, op.block) not in modules or op.op_class == "matmul" or not _in_cast_chain(op):
        return None
    if short_name(op.name) != "abs":
        return OpTime(0.0, 0.0, 0.0)
    hp_bytes = float(op.bytes_read)
    fp8_bytes = hp_bytes / DTYPE_BYTES.get(op.dtype, 2) * bytes_per_element
    moved = 2.0 * hp_bytes + fp8_bytes
    memory_s = moved / (gpu.memory_bandwidth_bytes_per_s * eff.bandwidth)
    return OpTime(0.0, memory_s, CAST_KERNELS * eff.graph_launch_overhead_s, CAST_KERNELS * eff.launch_overhead_s)


def is_folded(t: OpTime) -> bool:
    """True for a chain op folded into its cast's kernels (no kernel of its own)."""
    return t.kernel_s == 0.0 and t.overhead_s == 0.0 and t.dispatch_s == 0.0
