"""Efficiency factors of the cost model: the fraction of a datasheet peak that real kernels reach.

Every factor is printed with every result (``Efficiency.describe``). Where a factor was fitted on
the throughput rows of ``shared/reference/calibration.csv`` the fit is
``scripts/calibrate_fit.py`` (residuals in ``docs/accuracy.md``); the others are priors with
their source named here, because no calibration row constrains them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True, kw_only=True, slots=True)
class Efficiency:
    """Achievable fractions of peak, and fixed per-kernel costs."""

    tensor_core_matmul: float
    """Matmul/conv on tensor cores (fp16, bf16, tf32): fraction of the dense peak. FITTED."""
    fp32_matmul: float
    """Plain fp32 matmul/conv on CUDA cores (TF32 off): fraction of the fp32 peak. FITTED."""
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
    """Per kernel launch in eager PyTorch (CPU dispatch + launch latency not hidden by the GPU). FITTED."""
    graph_launch_overhead_s: float
    """Per kernel when the decode loop is replayed as a CUDA graph (vLLM, TensorRT-LLM, torch.compile
    reduce-overhead). Prior: ~1-2 µs between kernels of a graph (NVIDIA CUDA graphs blog, 2019)."""
    fitted_on: tuple[str, ...] = ()
    """calibration.csv row ids the FITTED factors came from."""

    def with_(self, **changes: Any) -> Efficiency:
        return replace(self, **changes)

    def describe(self) -> tuple[str, ...]:
        fitted = ", ".join(self.fitted_on) or "none"
        return (
            f"efficiency: tensor-core matmul/conv {self.tensor_core_matmul:.0%} of dense peak, "
            f"fp32 CUDA-core matmul {self.fp32_matmul:.0%} of fp32 peak (fitted on {fitted})",
            f"efficiency: fused attention {self.attention_fused:.0%} of peak (FlashAttention-2 prior), "
            f"memory-bound ops at {self.bandwidth:.0%} of DRAM bandwidth (prior)",
            f"launch overhead {self.launch_overhead_s * 1e6:.1f} µs per kernel (fitted); "
            f"{self.graph_launch_overhead_s * 1e6:.1f} µs per kernel in a CUDA-graph decode loop (prior)",
        )


# The fitted values are the output of ``python scripts/calibrate_fit.py`` (coordinate descent
# on squared log errors; residuals in docs/accuracy.md). With four rows and three fitted factors the
# two BERT rows essentially pin fp32_matmul and launch_overhead_s; the two Korthikanti rows pin
# tensor_core_matmul.
DEFAULT_EFFICIENCY = Efficiency(
    tensor_core_matmul=0.60,
    fp32_matmul=0.82,
    attention_fused=0.55,
    bandwidth=0.80,
    launch_overhead_s=6.5e-6,
    graph_launch_overhead_s=1.5e-6,
    fitted_on=("hf-bertl-vanilla-tput", "hf-bertl-fp16-tput", "kor-t5-22b-iter-sel", "kor-t5-22b-iter-full"),
)
