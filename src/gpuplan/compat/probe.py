"""Turn a :class:`FactsSource` into an :class:`Environment`.

The same functions run for the live machine and for a recorded environment; nothing here touches the
system directly. Nothing here raises on bad tool output: unreadable facts become ``None``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuplan.compat import parsers
from gpuplan.compat.environment import Environment, GpuInfo, PlatformInfo, RocmInfo, ToolkitInfo
from gpuplan.compat.facts import FactsSource
from gpuplan.compat.probe_nvidia import probe_nvidia
from gpuplan.compat.probe_torch import probe_torch
from gpuplan.compat.versions import major_minor

__all__ = ["probe", "probe_nvidia", "probe_platform", "probe_rocm", "probe_toolkit", "probe_torch"]


def probe(source: FactsSource, label: str = "live") -> Environment:
    plat = probe_platform(source)
    env_vars = dict(source.env())
    nvidia = probe_nvidia(source, plat)
    return Environment(
        platform=plat,
        torch=probe_torch(source, plat),
        nvidia=nvidia,
        toolkit=probe_toolkit(source, env_vars),
        rocm=probe_rocm(source),
        mps=_mps(plat, source.torch_runtime()),
        env_vars=env_vars,
        source=label,
    )


def probe_platform(source: FactsSource) -> PlatformInfo:
    raw = source.platform()
    system = raw.get("system") or None
    os_name = None
    wsl = False
    if system == "Linux":
        os_release = source.read_text("/etc/os-release")
        os_name = parsers.parse_os_release(os_release) if os_release else None
        proc_version = source.read_text("/proc/version") or ""
        wsl = "microsoft" in proc_version.lower() or "microsoft" in (raw.get("release") or "").lower()
    elif system == "Darwin":
        os_name = f"macOS {raw['macos']}" if raw.get("macos") else "macOS"
    elif system == "Windows":
        os_name = f"Windows {raw.get('release', '')}".strip()
    return PlatformInfo(
        system=system,
        release=raw.get("release") or None,
        machine=raw.get("machine") or None,
        python=raw.get("python") or None,
        os_name=os_name,
        wsl=wsl,
    )


def probe_toolkit(source: FactsSource, env_vars: Mapping[str, str]) -> ToolkitInfo:
    cuda_home = env_vars.get("CUDA_HOME") or env_vars.get("CUDA_PATH")
    nvcc_cmd = f"{cuda_home.rstrip('/')}/bin/nvcc" if cuda_home else "nvcc"
    out = source.run([nvcc_cmd, "--version"])
    if out is None and cuda_home:
        nvcc_cmd = "nvcc"
        out = source.run([nvcc_cmd, "--version"])
    nvcc_version = parsers.parse_nvcc(out.stdout) if out is not None and out.returncode == 0 else None
    header_version, header_path = None, None
    candidates = [f"{cuda_home.rstrip('/')}/include/cudnn_version.h"] if cuda_home else []
    candidates += ["/usr/include/cudnn_version.h", "/usr/local/cuda/include/cudnn_version.h"]
    for path in candidates:
        text = source.read_text(path)
        if text:
            header_version, header_path = parsers.parse_cudnn_header(text), path
            break
    return ToolkitInfo(
        nvcc_version=nvcc_version,
        nvcc_path=nvcc_cmd if out is not None else None,
        cuda_home=cuda_home,
        cudnn_header_version=header_version,
        cudnn_header_path=header_path,
    )


def probe_rocm(source: FactsSource) -> RocmInfo:
    version_text = source.read_text("/opt/rocm/.info/version")
    version = major_minor(version_text.strip()) if version_text else None
    out = source.run(["rocm-smi", "--showproductname"])
    names = parsers.parse_rocm_smi(out.stdout) if out is not None and out.returncode == 0 else []
    gpus = tuple(GpuInfo(index=i, vendor="amd", name=n, cc=None, cc_source=None) for i, n in enumerate(names))
    return RocmInfo(present=out is not None or version_text is not None, version=version, gpus=gpus)


def _mps(plat: PlatformInfo, runtime: Mapping[str, Any] | None) -> str | None:
    if plat.system != "Darwin":
        return "not applicable"
    if runtime and isinstance(runtime.get("mps_available"), bool):
        return "available" if runtime["mps_available"] else "unavailable"
    # Apple silicon always has the MPS device (macOS >= 12.3); Intel Macs only with a suitable AMD GPU
    if plat.machine == "arm64":
        return "available"
    return None
