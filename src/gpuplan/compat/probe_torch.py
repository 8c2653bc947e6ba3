"""The installed torch from a facts source, without importing it unless the source already did.

Version and build come from pip metadata and torch/version.py (read as text); cuDNN and NCCL from their
pip packages; the arch list from the release data for official wheels, or from an imported torch.
"""

from __future__ import annotations

import re
from typing import Any

from gpuplan.compat import dataload, parsers
from gpuplan.compat.coerce import as_bool, as_int
from gpuplan.compat.environment import PlatformInfo, TorchInfo
from gpuplan.compat.facts import FactsSource
from gpuplan.compat.versions import cuda_from_tag, local_tag, major_minor

# pip packages that carry cuDNN / NCCL for CUDA wheels (newest CUDA major first)
_CUDNN_DISTS = ("nvidia-cudnn-cu13", "nvidia-cudnn-cu12", "nvidia-cudnn-cu11")
_NCCL_DISTS = ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11")


def _format_cudnn(value: Any) -> str | None:
    """torch.backends.cudnn.version() -> '9.10.2' (91002: v9 encoding; 8907: v8 encoding)."""
    number = as_int(value)
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
        return TorchInfo(
            installed=False, version=None, build=None, cuda=None, hip=None, git_version=None, arch_list=None,
            arch_list_source=None, arch_list_in_data=None, cudnn=None, cudnn_source=None, nccl=None,
            torchvision=torchvision, torchaudio=torchaudio, imported=False, import_error=import_error,
        )
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
    data_arch, data_source = _arch_from_data(version, cuda, plat) if build == "cuda" else (None, None)
    arch_list, arch_source = data_arch, data_source
    if imported and runtime and isinstance(runtime.get("arch_list"), list) and runtime["arch_list"]:
        arch_list, arch_source = tuple(str(a) for a in runtime["arch_list"]), "torch.cuda.get_arch_list()"
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
        arch_list_in_data=data_arch,
        cudnn=cudnn,
        cudnn_source=cudnn_source,
        nccl=nccl,
        torchvision=torchvision,
        torchaudio=torchaudio,
        imported=imported,
        import_error=import_error,
        cuda_available=as_bool(runtime.get("cuda_available")) if imported and runtime else None,
        device_count=as_int(runtime.get("device_count")) if imported and runtime else None,
    )


def _cuda_from_local_tag(version: str) -> str | None:
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
