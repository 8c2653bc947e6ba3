"""Turn a :class:`FactsSource` into an :class:`Environment`.

The same functions run for the live machine and for a recorded environment; nothing here touches the
system directly. Nothing here raises on bad tool output: unreadable facts become ``None``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuplan.compat import parsers, rocm
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
    """AMD GPUs: product names from rocm-smi (or its successor amd-smi), gfx targets from whichever tool
    reports them (newer rocm-smi, amd-smi, rocminfo), else from the product-name table."""
    version_text = source.read_text("/opt/rocm/.info/version")
    version = major_minor(version_text.strip()) if version_text else None
    smi = source.run(["rocm-smi", "--showproductname"])
    rows: list[tuple[str | None, str | None]] = []
    tool = "rocm-smi"
    if smi is not None and smi.returncode == 0:
        rows = [(n, g) for n, g in parsers.parse_rocm_smi_targets(smi.stdout)]
    amd = source.run(["amd-smi", "static", "--asic"]) if not rows or any(g is None for _, g in rows) else None
    if amd is not None and amd.returncode == 0:
        amd_rows = parsers.parse_amd_smi_static(amd.stdout)
        if not rows:
            rows, tool = amd_rows, "amd-smi"
        elif len(amd_rows) == len(rows):
            rows = [(n or an, g or ag) for (n, g), (an, ag) in zip(rows, amd_rows, strict=True)]
    info = source.run(["rocminfo"]) if rows and any(g is None for _, g in rows) else None
    agents = parsers.parse_rocminfo(info.stdout) if info is not None and info.returncode == 0 else []
    gpus = []
    for i, (name, gfx) in enumerate(rows):
        where = tool if gfx else None
        if gfx is None and len(agents) == len(rows):
            gfx, where = agents[i][1], "rocminfo" if agents[i][1] else None
        if gfx is None:
            gfx = rocm.gfx_for_name(name)
            where = "name table" if gfx else None
        gpus.append(GpuInfo(index=i, vendor="amd", name=name, cc=None, cc_source=None, gfx=gfx, gfx_source=where))
    present = smi is not None or amd is not None or version_text is not None
    return RocmInfo(present=present, version=version, gpus=tuple(gpus))


def _mps(plat: PlatformInfo, runtime: Mapping[str, Any] | None) -> str | None:
    if plat.system != "Darwin":
        return "not applicable"
    if runtime and isinstance(runtime.get("mps_available"), bool):
        return "available" if runtime["mps_available"] else "unavailable"
    # Apple silicon always has the MPS device (macOS >= 12.3); Intel Macs only with a suitable AMD GPU
    if plat.machine == "arm64":
        return "available"
    return None
