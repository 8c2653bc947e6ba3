"""gpuplan: what a PyTorch workload needs from a GPU, computed for the user's own model.

The library never prints; estimators return plain typed results, and ``gpuplan.report`` renders them:
``to_dict()`` and ``str()`` go through ``gpuplan.presentation``, which the import below fills. Heavy
dependencies (torch, transformers) are imported only by the functions that need them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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
from gpuplan.estimate import Calibration, Estimate
from gpuplan.report import registry as _renderers  # noqa: F401  (fills gpuplan.presentation)
from gpuplan.simulate import Simulation, simulate
from gpuplan.trace.step import TracedStep, trace_step
from gpuplan.version import VERSION
from gpuplan.workload import Workload

if TYPE_CHECKING:
    # for type checkers ``gpuplan.estimate`` is the function (what users call); at run time it is the
    # module, made callable (estimate.py), so ``gpuplan.estimate.Estimate`` keeps working too
    from gpuplan.estimate import estimate
else:
    from gpuplan import estimate

__version__ = VERSION

__all__ = [
    "Calibration",
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
