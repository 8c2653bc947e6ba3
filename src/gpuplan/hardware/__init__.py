"""GPU catalog: one sourced data file per GPU, typed records, name resolution, MIG slices.

No torch import here: ``gpuplan gpus`` must start fast.
"""

from __future__ import annotations

from gpuplan.hardware.catalog import all_gpus, get_gpu, gpu_ids, list_gpus, resolve_gpu
from gpuplan.hardware.gpu import DEFAULT_COMPUTE_CAPABILITY, DTYPES, GPU, TIERS, MIGProfile
from gpuplan.hardware.interconnect import pcie_gb_per_s_per_direction

__all__ = [
    "DEFAULT_COMPUTE_CAPABILITY",
    "DTYPES",
    "GPU",
    "TIERS",
    "MIGProfile",
    "all_gpus",
    "get_gpu",
    "gpu_ids",
    "list_gpus",
    "pcie_gb_per_s_per_direction",
    "resolve_gpu",
]
