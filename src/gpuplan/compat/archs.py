"""Does a wheel's arch list have kernels for a GPU's compute capability?

The rule is PyTorch's own (torch 2.13 ``torch/cuda/__init__.py`` DEVICE_REQUIREMENT, source
S-TORCH213 in data/sources.md) plus NVIDIA's PTX rule: a cubin ``sm_XY`` runs on devices of the same
major with minor >= Y, except integrated (Tegra) parts that run only their own cubins; PTX
``compute_XY`` is JIT-compiled for any device with CC >= X.Y.
"""

from __future__ import annotations

import enum

from gpuplan.compat.archcodes import cc_to_code, parse_arch_list
from gpuplan.compat.dataload import gpu_data


class ArchSupport(str, enum.Enum):
    """How a build covers one GPU."""

    NATIVE = "native"  # a cubin for this GPU's major at or below its minor
    PTX_ONLY = "ptx-only"  # only PTX JIT: works, slow first run, needs a driver that knows the PTX
    NONE = "none"  # no kernels: "no kernel image is available"
    UNKNOWN = "unknown"  # CC or arch list not known


def support(cc: str | None, arch_list: list[str] | None) -> ArchSupport:
    """How well ``arch_list`` (get_arch_list() style) covers a GPU of compute capability ``cc``."""
    if cc is None or not arch_list:
        return ArchSupport.UNKNOWN
    device = cc_to_code(cc)
    if device is None:
        return ArchSupport.UNKNOWN
    igpu_only = {cc_to_code(c) for c in gpu_data().igpu_only}
    has_ptx = False
    for kind, code in parse_arch_list(arch_list):
        if kind == "sm":
            if code == device:
                return ArchSupport.NATIVE
            same_major = code // 10 == device // 10 and code % 10 <= device % 10
            if same_major and device not in igpu_only and code not in igpu_only:
                return ArchSupport.NATIVE
        elif code <= device:
            has_ptx = True
    return ArchSupport.PTX_ONLY if has_ptx else ArchSupport.NONE


def architecture(cc: str | None) -> str | None:
    """'9.0' -> 'Hopper'."""
    if cc is None:
        return None
    return gpu_data().families.get(cc)
