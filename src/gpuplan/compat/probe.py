"""Turn a :class:`FactsSource` into an :class:`Environment`.

The same functions run for the live machine and for a recorded environment; nothing here touches the
system directly. Nothing here raises on bad tool output: unreadable facts become ``None``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gpuplan.compat import dataload, parsers
from gpuplan.compat.drivers import driver_max_cuda
from gpuplan.compat.environment import (
    Environment,
    GpuInfo,
    NvidiaInfo,
    PlatformInfo,
    RocmInfo,
    ToolkitInfo,
    TorchInfo,
)
from gpuplan.compat.facts import FactsSource
from gpuplan.compat.gpunames import cc_from_name
from gpuplan.compat.versions import cuda_from_driver_int, local_tag, major_minor

# pip packages that carry cuDNN / NCCL for CUDA wheels (newest CUDA major first)
_CUDNN_DISTS = ("nvidia-cudnn-cu13", "nvidia-cudnn-cu12", "nvidia-cudnn-cu11")
_NCCL_DISTS = ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11")
_CSV_CC = ["--query-gpu=index,compute_cap", "--format=csv,noheader"]


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


def _first_line(*texts: str) -> str | None:
    for text in texts:
        for line in text.splitlines():
            if line.strip():
                return line.strip()
    return None


def _as_int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _as_bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _gpu_from_mapping(raw: Mapping[str, Any], index: int) -> GpuInfo:
    name = raw.get("name") if isinstance(raw.get("name"), str) else None
    cc = raw.get("cc") if isinstance(raw.get("cc"), str) else None
    return _with_cc(
        GpuInfo(
            index=_index if (_index := _as_int(raw.get("index"))) is not None else index,
            vendor="nvidia",
            name=name,
            cc=major_minor(cc) if cc else None,
            cc_source="driver" if cc and major_minor(cc) else None,
            memory_total_bytes=_as_int(raw.get("memory_total_bytes")),
            memory_used_bytes=_as_int(raw.get("memory_used_bytes")),
            mig_mode=_as_bool(raw.get("mig_mode")),
            mig_devices=_as_int(raw.get("mig_devices")),
            ecc=_as_bool(raw.get("ecc")),
            processes=_as_int(raw.get("processes")),
        )
    )


def _with_cc(gpu: GpuInfo) -> GpuInfo:
    """Fill a missing compute capability from the product-name table."""
    if gpu.cc is not None:
        return gpu
    cc = cc_from_name(gpu.name)
    if cc is None:
        return gpu
    return GpuInfo(**{**gpu.__dict__, "cc": cc, "cc_source": "name table"})


def _from_smi(report: parsers.SmiReport, ccs: dict[int, str]) -> tuple[GpuInfo, ...]:
    gpus = []
    for g in report.gpus:
        cc = g.cc or ccs.get(g.index)
        gpus.append(
            _with_cc(
                GpuInfo(
                    index=g.index,
                    vendor="nvidia",
                    name=g.name,
                    cc=cc,
                    cc_source="driver" if cc else None,
                    memory_total_bytes=g.memory_total_bytes,
                    memory_used_bytes=g.memory_used_bytes,
                    mig_mode=g.mig_mode,
                    mig_devices=g.mig_devices,
                    ecc=g.ecc,
                    processes=g.processes,
                )
            )
        )
    return tuple(gpus)


def _smi_ccs(source: FactsSource) -> dict[int, str]:
    """Compute capabilities from ``nvidia-smi --query-gpu=index,compute_cap`` (drivers >= ~510)."""
    out = source.run(["nvidia-smi", *_CSV_CC])
    if out is None or out.returncode != 0:
        return {}
    ccs = {}
    for row in parsers.parse_smi_csv(out.stdout, ["index", "compute_cap"]):
        index, cc = _as_int(row.get("index")), major_minor(row.get("compute_cap"))
        if index is not None and cc is not None:
            ccs[index] = cc
    return ccs


def probe_nvidia(source: FactsSource, plat: PlatformInfo) -> NvidiaInfo:
    windows = plat.system == "Windows"
    nvml = source.nvml()
    nvml_problem = None
    if nvml is not None and "error" not in nvml and isinstance(nvml.get("gpus"), list):
        driver = nvml.get("driver_version") if isinstance(nvml.get("driver_version"), str) else None
        reported = cuda_from_driver_int(_as_int(nvml.get("cuda_driver_version")))
        gpus = tuple(
            _gpu_from_mapping(g, i) for i, g in enumerate(nvml["gpus"]) if isinstance(g, Mapping)
        )
        return _nvidia_info("nvml", driver, reported, gpus, True, None, windows)
    if nvml is not None and "error" in nvml:
        nvml_problem = f"NVML: {nvml['error']}"

    # `nvidia-smi -q` says the most; the plain table is the fallback (and what people paste in issues)
    query = source.run(["nvidia-smi", "-q"])
    report, label = parsers.SmiReport(), "nvidia-smi -q"
    if query is not None and query.returncode == 0:
        report = parsers.parse_smi_query(query.stdout)
    if not report.gpus and report.driver_version is None:
        table = source.run(["nvidia-smi"])
        if table is not None and table.returncode == 0:
            report, label = parsers.parse_smi_table(table.stdout), "nvidia-smi"
        failed = next((o for o in (query, table) if o is not None and o.returncode != 0), None)
        if query is None and table is None:
            return NvidiaInfo("none", None, None, None, (), False, nvml_problem)
        if failed is not None and not report.gpus and report.driver_version is None:
            code = failed.returncode
            problem = _first_line(failed.stdout, failed.stderr) or f"nvidia-smi exited with {code}"
            return NvidiaInfo("nvidia-smi", None, None, None, (), True, problem)
    gpus = _from_smi(report, _smi_ccs(source) if any(g.cc is None for g in report.gpus) else {})
    gpus = _mig_from_list(source, gpus)
    return _nvidia_info(label, report.driver_version, report.cuda_version, gpus, True, None, windows)


def _mig_from_list(source: FactsSource, gpus: tuple[GpuInfo, ...]) -> tuple[GpuInfo, ...]:
    """Count MIG devices with ``nvidia-smi -L`` where MIG is on and the count is not known yet."""
    if not any(g.mig_mode and g.mig_devices is None for g in gpus):
        return gpus
    out = source.run(["nvidia-smi", "-L"])
    if out is None or out.returncode != 0:
        return gpus
    counts = parsers.parse_smi_list(out.stdout)
    return tuple(
        GpuInfo(**{**g.__dict__, "mig_devices": counts.get(g.index)})
        if g.mig_mode and g.mig_devices is None
        else g
        for g in gpus
    )


def _nvidia_info(
    label: str,
    driver: str | None,
    reported_cuda: str | None,
    gpus: tuple[GpuInfo, ...],
    smi_present: bool,
    problem: str | None,
    windows: bool,
) -> NvidiaInfo:
    derived = None if reported_cuda else driver_max_cuda(driver, windows)
    return NvidiaInfo(
        source=label,
        driver_version=driver,
        driver_cuda=reported_cuda or derived,
        driver_cuda_source="driver" if reported_cuda else ("toolkit table" if derived else None),
        gpus=gpus,
        smi_present=smi_present,
        problem=problem,
    )


def _format_cudnn(value: Any) -> str | None:
    """torch.backends.cudnn.version() -> '9.10.2' (91002: v9 encoding; 8907: v8 encoding)."""
    number = _as_int(value)
    if number is None:
        return str(value) if value else None
    if number >= 90000:
        return f"{number // 10000}.{number % 10000 // 100}.{number % 100}"
    return f"{number // 1000}.{number % 1000 // 100}.{number % 100}"


def probe_torch(source: FactsSource, plat: PlatformInfo) -> TorchInfo:
    runtime = source.torch_runtime()
    import_error = runtime.get("import_error") if runtime else None
    imported = bool(runtime) and not import_error
    version = source.dist_version("torch")
    if imported and runtime and isinstance(runtime.get("version"), str):
        version = runtime["version"]
    torchvision = source.dist_version("torchvision")
    torchaudio = source.dist_version("torchaudio")
    if version is None:
        return TorchInfo(False, None, None, None, None, None, None, None, None, None, None,
                         torchvision, torchaudio, False, import_error)
    text = source.package_file("torch", "version.py")
    assigned = parsers.parse_python_assignments(text) if text else {}
    if not imported and assigned.get("__version__"):
        version = assigned["__version__"] or version  # version.py keeps the local tag (+cu130)
    cuda = assigned.get("cuda") if text else _cuda_from_local_tag(version)
    hip = assigned.get("hip") if text else _hip_from_local_tag(version)
    if imported and runtime:
        cuda = runtime.get("cuda") if isinstance(runtime.get("cuda"), str) else cuda
        hip = runtime.get("hip") if isinstance(runtime.get("hip"), str) else hip
    build = _build_kind(version, cuda, hip, assigned.get("xpu"), text is not None or imported)
    arch_list, arch_source = None, None
    if imported and runtime and isinstance(runtime.get("arch_list"), list) and runtime["arch_list"]:
        arch_list, arch_source = tuple(str(a) for a in runtime["arch_list"]), "torch.cuda.get_arch_list()"
    elif build == "cuda":
        arch_list, arch_source = _arch_from_data(version, cuda, plat)
    cudnn, cudnn_source = None, None
    if imported and runtime and runtime.get("cudnn"):
        cudnn, cudnn_source = _format_cudnn(runtime["cudnn"]), "torch.backends.cudnn.version()"
    else:
        for dist in _CUDNN_DISTS:
            found = source.dist_version(dist)
            if found:
                cudnn, cudnn_source = found, f"pip package {dist}"
                break
    nccl = runtime.get("nccl") if imported and runtime and isinstance(runtime.get("nccl"), str) else None
    if nccl is None:
        nccl = next((v for v in (source.dist_version(d) for d in _NCCL_DISTS) if v), None)
    return TorchInfo(
        installed=True,
        version=version,
        build=build,
        cuda=cuda,
        hip=hip,
        git_version=assigned.get("git_version"),
        arch_list=arch_list,
        arch_list_source=arch_source,
        cudnn=cudnn,
        cudnn_source=cudnn_source,
        nccl=nccl,
        torchvision=torchvision,
        torchaudio=torchaudio,
        imported=imported,
        import_error=import_error,
        cuda_available=_as_bool(runtime.get("cuda_available")) if imported and runtime else None,
        device_count=_as_int(runtime.get("device_count")) if imported and runtime else None,
    )


def _cuda_from_local_tag(version: str) -> str | None:
    from gpuplan.compat.versions import cuda_from_tag

    return cuda_from_tag(local_tag(version))


def _hip_from_local_tag(version: str) -> str | None:
    tag = local_tag(version)
    return tag[4:] if tag and tag.startswith("rocm") else None


def _build_kind(version: str, cuda: str | None, hip: str | None, xpu: str | None, known: bool) -> str | None:
    if cuda:
        return "cuda"
    if hip:
        return "rocm"
    if xpu:
        return "xpu"
    tag = local_tag(version)
    if known or tag == "cpu":
        return "cpu"
    return None


def _arch_from_data(
    version: str, cuda: str | None, plat: PlatformInfo
) -> tuple[tuple[str, ...] | None, str | None]:
    """The wheel's arch list from the release data, found by the CUDA version torch was built with.

    Only for official release wheels ('2.7.1', '2.7.1+cu126'): a source build ('2.9.0a0+git...') or a
    nightly ('2.10.0.dev20250901+cu128') has its own arch list, which only an imported torch can tell.
    """
    if not re.fullmatch(r"\d+\.\d+\.\d+(?:\+cu\d+)?", version):
        return None, None
    rel = dataload.release(version)
    cuda_mm = major_minor(cuda)
    if rel is None or cuda_mm is None:
        return None, None
    variant = next((v for v in rel.variants if v.cuda == cuda_mm), None)
    if variant is None:
        return None, None
    windows = plat.system == "Windows"
    arch = variant.arch_for(plat.os_family, plat.machine)
    aarch64 = not windows and plat.machine in ("aarch64", "arm64")
    where = "Windows" if windows else ("Linux aarch64" if aarch64 and variant.arch_aarch64 else "Linux")
    note = f"release data for {rel.version} {variant.tag}, {where}"
    if variant.arch_confidence != "build-script":
        note += f", {variant.arch_confidence}"
    return arch, note


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
