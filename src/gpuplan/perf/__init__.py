"""Cost model: time of a traced step on a GPU (per-op roofline with fitted efficiency factors)."""

from __future__ import annotations

from gpuplan.perf.efficiency import DEFAULT_EFFICIENCY, Efficiency
from gpuplan.perf.step_time import WEIGHT_QUANTS, InferenceTime, StepTime, model_flops, step_time

__all__ = [
    "DEFAULT_EFFICIENCY",
    "WEIGHT_QUANTS",
    "Efficiency",
    "InferenceTime",
    "StepTime",
    "model_flops",
    "step_time",
]
