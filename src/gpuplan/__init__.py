"""gpuplan: what a PyTorch workload needs from a GPU, computed for the user's own model.

The library never prints; estimators return typed results that render themselves through
``gpuplan.report``. Heavy dependencies (torch, transformers) are imported only by the functions
that need them.
"""

from __future__ import annotations

from gpuplan import estimate
from gpuplan.errors import (
    ConfigError,
    GpuplanError,
    LayoutError,
    MissingDependencyError,
    ModelSourceError,
    TraceError,
    UnknownGPUError,
    UnknownModelError,
)
from gpuplan.estimate import Estimate
from gpuplan.simulate import Simulation, simulate
from gpuplan.trace.step import TracedStep, trace_step
from gpuplan.workload import Workload

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "Estimate",
    "GpuplanError",
    "LayoutError",
    "MissingDependencyError",
    "ModelSourceError",
    "Simulation",
    "TraceError",
    "TracedStep",
    "UnknownGPUError",
    "UnknownModelError",
    "Workload",
    "__version__",
    "estimate",
    "simulate",
    "trace_step",
]
