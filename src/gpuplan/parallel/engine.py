"""The kernels an engine runs that eager PyTorch + Hugging Face modules do not: Megatron-LM.

The planner times every layout from one trace of the Hugging Face model in eager PyTorch. Megatron-LM
(2021/22, the Narayanan et al. and Korthikanti et al. runs) executes the same transformer block with
its own CUDA kernels, and one of them changes the traffic by a large factor: the **fused
scale-mask-softmax** (``megatron/fused_kernels/scaled_upper_triang_masked_softmax*.cu``). Where HF's
eager attention runs a chain of elementwise kernels over the ``b·a·s²`` scores (scale, mask add,
autocast's fp32 upcast, softmax in fp32, downcast; in backward the same chain mirrored), Megatron
reads the 16-bit scores once and writes the 16-bit probabilities once (backward: reads the gradient
and the probabilities once, writes the gradient once). ``megatron_ops`` rewrites each such chain of a
trace into that one kernel; everything else (GEMMs, dropout, layer norms, bias-GeLU) keeps its traced
cost, and the per-op cost model (``gpuplan.perf``) times the result the one way it times any op.

Megatron's GEMMs ran through its 2021/22 software stack (cuBLAS of CUDA 11.x, fp16 weights) at a rate
the 2023-24 PyTorch rows that fit the architecture factors do not constrain: one factor per engine,
``megatron_gemm_scale`` (×the architecture's large-GEMM fraction), fitted by
``scripts/fit_engine_factors.py`` on the Korthikanti et al. Table 5 rows only and checked on the
Megatron-LM Table 1 rows (``parallel/data/engine_factors.json``: source, fit, residuals).
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from gpuplan.dtypes import DTYPE_BYTES, FLOAT_DTYPES

if TYPE_CHECKING:
    from collections.abc import Sequence

    from gpuplan.perf.efficiency import Efficiency
    from gpuplan.trace.records import OpRecord

ENGINE_FACTORS_FILE: Final = Path(__file__).with_name("data") / "engine_factors.json"
FUSED_SOFTMAX: Final = "megatron.scaled_upper_triang_masked_softmax"
FUSED_SOFTMAX_BACKWARD: Final = "megatron.scaled_upper_triang_masked_softmax_backward"
_SOFTMAX: Final = {"aten._softmax.default": False, "aten._softmax_backward_data.default": True}
"""The op each chain forms around -> is it the backward chain."""


@lru_cache(maxsize=1)
def engine_factors() -> dict[str, Any]:
    """The engine factors file as data (schema in its ``about`` field)."""
    with ENGINE_FACTORS_FILE.open(encoding="utf-8") as f:
        data: dict[str, Any] = json.load(f)
    return data


def megatron_gemm_scale() -> float:
    """Megatron-LM 2021/22's large-GEMM rate over the architecture factors' (fitted)."""
    return float(engine_factors()["megatron"]["gemm_scale"])


def megatron_efficiency(eff: Efficiency, gemm_scale: float | None = None) -> Efficiency:
    """``eff`` with Megatron's GEMM rate (``gemm_scale`` × the large-GEMM fraction, never above the
    generation's public GEMM ceiling) and its memory-bound kernels at the streaming rate: Megatron-LM runs
    its own fused kernels (scale-mask-softmax, bias-GeLU, bias-dropout-add, fused layer norm), not the
    eager elementwise kernels the fitted ``elementwise`` share describes."""
    g = megatron_gemm_scale() if gemm_scale is None else gemm_scale
    return eff.with_(tensor_core_matmul=eff.tensor_core_matmul * g, elementwise=1.0)


def megatron_kernels_note() -> str:
    """The assumption line of a plan that shows a Megatron-LM layout."""
    return (
        "Megatron-LM layouts run Megatron's fused scale-mask-softmax in place of the traced softmax chain, "
        f"its GEMMs at {megatron_gemm_scale():.2f}× the architecture's rate (fitted on Megatron-LM 2021/22 "
        "A100 runs, Korthikanti et al. Table 5; parallel/data/engine_factors.json); Megatron with "
        "Transformer Engine / FlashAttention (2023+) is not what this models"
    )


def _is_dropout(op: OpRecord) -> bool:
    return "dropout" in op.name


def megatron_ops(ops: Sequence[OpRecord], compute_bytes: int) -> list[OpRecord]:
    """``ops`` (in program order) with every softmax chain over attention scores replaced by
    Megatron's fused scale-mask-softmax kernel (forward or backward), its scores and probabilities
    in the compute dtype (``compute_bytes`` per element).

    A chain is the softmax op and its contiguous neighbours in the same module that write the
    scores' element count (16- or 32-bit) and are neither matmuls nor dropout (Megatron runs the
    attention dropout as its own kernel, as HF does)."""
    out = list(ops)
    i = 0
    while i < len(out):
        op = out[i]
        backward = _SOFTMAX.get(op.name)
        item = DTYPE_BYTES.get(op.dtype, 0) if op.dtype in FLOAT_DTYPES else 0
        if backward is None or not item or op.bytes_written % item:
            i += 1
            continue
        n = op.bytes_written // item
        sizes = {2 * n, 4 * n}

        def in_chain(j: int, n_sizes: set[int] = sizes, module: str = op.module) -> bool:
            o = out[j]
            return (
                o.module == module
                and o.op_class != "matmul"
                and not _is_dropout(o)
                and o.bytes_written in n_sizes
                and o.name not in _SOFTMAX
            )

        lo = i
        while lo > 0 and in_chain(lo - 1):
            lo -= 1
        hi = i + 1
        while hi < len(out) and in_chain(hi):
            hi += 1
        fused = replace(
            op,
            name=FUSED_SOFTMAX_BACKWARD if backward else FUSED_SOFTMAX,
            dtype=out[lo].dtype,  # the scores' dtype as the chain received them
            flops=0,
            bytes_read=(2 if backward else 1) * n * compute_bytes,
            bytes_written=n * compute_bytes,
        )
        out[lo:hi] = [fused]
        i = lo + 1
    return out


__all__ = [
    "ENGINE_FACTORS_FILE",
    "FUSED_SOFTMAX",
    "FUSED_SOFTMAX_BACKWARD",
    "engine_factors",
    "megatron_efficiency",
    "megatron_gemm_scale",
    "megatron_kernels_note",
    "megatron_ops",
]
