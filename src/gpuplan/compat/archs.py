"""Does a wheel's arch list have kernels for a GPU's compute capability?

The rule is PyTorch's own (torch 2.13 ``torch/cuda/__init__.py`` DEVICE_REQUIREMENT, source
S-TORCH213 in data/sources.md) plus NVIDIA's PTX rule: a cubin ``sm_XY`` runs on devices of the same
major with minor >= Y, except integrated (Tegra) parts that run only their own cubins; PTX
``compute_XY`` is JIT-compiled for any device with CC >= X.Y.
"""

from __future__ import annotations

import enum
import re

from gpuplan.compat.dataload import gpu_data

_ENTRY = re.compile(r"^(sm|compute)_(\d+)([af]?)$")


class ArchSupport(str, enum.Enum):
    """How a build covers one GPU."""

    NATIVE = "native"  # a cubin for this GPU's major at or below its minor
    PTX_ONLY = "ptx-only"  # only PTX JIT: works, slow first run, needs a driver that knows the PTX
    NONE = "none"  # no kernels: "no kernel image is available"
    UNKNOWN = "unknown"  # CC or arch list not known


def cc_to_code(cc: str) -> int | None:
    """'8.6' -> 86, '12.0' -> 120."""
    try:
        major_s, minor_s = cc.split(".")
        return int(major_s) * 10 + int(minor_s)
    except ValueError:
        return None


def code_to_cc(code: int) -> str:
    return f"{code // 10}.{code % 10}"


def parse_arch_setting(setting: str) -> list[str]:
    """TORCH_CUDA_ARCH_LIST style '7.5;8.0;12.0+PTX' -> ['sm_75', 'sm_80', 'sm_120', 'compute_120']."""
    entries: list[str] = []
    for raw in setting.replace(" ", ";").split(";"):
        item = raw.strip()
        if not item:
            continue
        ptx = item.endswith("+PTX")
        code = cc_to_code(item.removesuffix("+PTX"))
        if code is None:
            continue
        entries.append(f"sm_{code}")
        if ptx:
            entries.append(f"compute_{code}")
    return entries


def parse_arch_list(entries: list[str]) -> list[tuple[str, int]]:
    """['sm_90', 'compute_120', 'garbage'] -> [('sm', 90), ('compute', 120)]; suffixes a/f dropped."""
    parsed: list[tuple[str, int]] = []
    for entry in entries:
        match = _ENTRY.match(entry.strip())
        if match:
            parsed.append((match.group(1), int(match.group(2))))
    return parsed


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
