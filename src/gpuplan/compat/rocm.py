"""Does an official PyTorch ROCm wheel have code objects for an AMD GPU's gfx target?

ROCm loads a kernel only for the exact LLVM target it was compiled for (gfx1100, gfx942, ...), unlike
CUDA's same-major cubin rule; a missing target is "hipErrorNoBinaryForGpu" or "HIP error: invalid device
function". The wheels' target lists and the safe HSA_OVERRIDE_GFX_VERSION values are data
(data/rocm.yaml, each with its source).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuplan.compat.dataload import RocmArchList, rocm_data
from gpuplan.compat.versions import major_minor, parse_version

_GFX = re.compile(r"\bgfx(\d{3,4}[a-z]?)\b", re.IGNORECASE)


def gfx_in(text: str | None) -> str | None:
    """The first gfx target named in ``text`` ("amdgcn-amd-amdhsa--gfx1031:xnack-" -> "gfx1031")."""
    match = _GFX.search(text or "")
    return f"gfx{match.group(1).lower()}" if match else None


def gfx_for_name(name: str | None) -> str | None:
    """The gfx target of an AMD product name ("AMD Radeon RX 7900 XTX" -> "gfx1100"), None if unknown."""
    if not name:
        return None
    named = gfx_in(name)
    if named:
        return named
    for pattern, gfx in rocm_data().products:
        if pattern.search(name):
            return gfx
    return None


def wheel_arch_list(torch_version: str | None) -> RocmArchList | None:
    """The gfx list of the official ROCm wheel of a torch release, where a source pins it; else None."""
    release = major_minor(torch_version or "")
    for arch_list in rocm_data().arch_lists:
        if release and release in arch_list.torch:
            return arch_list
    return None


def in_any_official_wheel(gfx: str) -> bool:
    """Is ``gfx`` in the newest official list? (lists only grow, so absent there means absent everywhere)"""
    return gfx in rocm_data().arch_lists[-1].gfx


def in_every_rocm6_wheel(gfx: str) -> bool:
    """Targets every official ROCm >= 6.0 wheel has (the oldest list; every later list contains it)."""
    return gfx in rocm_data().arch_lists[0].gfx


def first_release_with(gfx: str) -> str | None:
    """The oldest torch release whose pinned wheel list has ``gfx`` (None: no pinned list has it)."""
    pinned = [(parse_version(t) or (0,), t) for a in rocm_data().arch_lists if gfx in a.gfx for t in a.torch]
    return min(pinned)[1] if pinned else None


@dataclass(frozen=True)
class Override:
    variable: str  # "HSA_OVERRIDE_GFX_VERSION=10.3.0"
    runs_as: str  # the target whose code objects the GPU then loads
    sources: tuple[str, ...]


def safe_override(gfx: str, available: tuple[str, ...] | None = None) -> Override | None:
    """The HSA_OVERRIDE_GFX_VERSION that is safe for ``gfx`` (same instruction set), if any; with
    ``available`` (the wheel's targets) only one whose stand-in target is in it."""
    data = rocm_data()
    entry = data.overrides.get(gfx)
    if entry is None:
        return None
    value, runs_as = entry
    if available is not None and runs_as not in available:
        return None
    return Override(f"HSA_OVERRIDE_GFX_VERSION={value}", runs_as, data.override_sources)
