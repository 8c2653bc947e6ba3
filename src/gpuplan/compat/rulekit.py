"""Small helpers the rule modules share: GPU labels, grouping identical GPUs, the install hint."""

from __future__ import annotations

from collections.abc import Callable

from gpuplan.compat.archcodes import cc_to_code
from gpuplan.compat.archs import architecture
from gpuplan.compat.environment import Environment, GpuInfo
from gpuplan.compat.findings import Finding
from gpuplan.compat.install import plan_install, request_from_environment

Rule = Callable[[Environment], list[Finding]]


def sm_label(cc: str | None) -> str:
    return f"sm_{cc_to_code(cc)}" if cc else "unknown"


def gpu_label(gpu: GpuInfo, indices: list[int] | None = None) -> str:
    arch = architecture(gpu.cc)
    cc = f"{sm_label(gpu.cc)}, {arch}" if arch else sm_label(gpu.cc)
    which = f"GPUs {', '.join(map(str, indices))}" if indices and len(indices) > 1 else f"GPU {gpu.index}"
    return f"{which} {gpu.name or '(name unknown)'} ({cc})"


def distinct_gpus(gpus: tuple[GpuInfo, ...]) -> list[tuple[GpuInfo, list[int]]]:
    """Identical GPUs (same name and capability) grouped, so eight H100s give one finding, not eight."""
    groups: dict[tuple[str | None, str | None], tuple[GpuInfo, list[int]]] = {}
    for gpu in gpus:
        groups.setdefault((gpu.name, gpu.cc), (gpu, []))[1].append(gpu.index)
    return list(groups.values())


def install_hint(env: Environment, torch: str | None = None) -> str:
    plan = plan_install(request_from_environment(env, torch))
    if not plan.ok or plan.command is None:
        return f"no official wheel fits ({plan.reason})"
    return plan.command


def is_windows(env: Environment) -> bool:
    return env.platform.system == "Windows"


def has_code(findings: list[Finding], code: str) -> bool:
    return any(f.code == code for f in findings)
