"""The compat data files (``data/*.yaml``) as typed, cached records.

Files are read on first use, never at import time, and parsed once per process. Each record keeps
the source ids of its facts; they resolve in ``data/sources.md``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from gpuplan.compat.archcodes import parse_arch_setting
from gpuplan.compat.versions import parse_version


def _load(name: str) -> Any:
    text = resources.files("gpuplan.compat").joinpath("data", name).read_text(encoding="utf-8")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader is ~10x faster when present
    return yaml.load(text, Loader=loader)  # SafeLoader variants only


@dataclass(frozen=True)
class WheelVariant:
    """One CUDA build of one release: download.pytorch.org/whl/<tag>."""

    tag: str
    cuda: str
    arch_linux: tuple[str, ...]  # Linux x86_64
    arch_windows: tuple[str, ...]
    arch_aarch64: tuple[str, ...] | None  # Linux aarch64 where the data has it; else the x86_64 list is used
    arch_confidence: str  # "build-script", "measured" or "inferred"
    linux_only: bool
    sources: tuple[str, ...]

    def arch_for(self, os_family: str | None, machine: str | None = None) -> tuple[str, ...]:
        """The arch list of this build's wheel for an OS ('linux', 'windows') and machine."""
        if os_family == "windows":
            return self.arch_windows
        if machine in ("aarch64", "arm64") and self.arch_aarch64 is not None:
            return self.arch_aarch64
        return self.arch_linux


@dataclass(frozen=True)
class Release:
    """One torch minor release and its official wheels."""

    version: str  # "2.14"
    latest: str  # "2.14.1"
    python: tuple[str, ...]
    pypi_default: str  # CUDA tag of the plain PyPI wheel on Linux x86_64
    torchvision: str | None
    conda: bool
    rocm: tuple[str, ...]
    variants: tuple[WheelVariant, ...]
    sources: tuple[str, ...]
    notes: tuple[str, ...]

    def variant(self, tag: str) -> WheelVariant | None:
        return next((v for v in self.variants if v.tag == tag), None)


@dataclass(frozen=True)
class DriverFloor:
    cuda_major: int
    linux: str | None
    windows: str | None
    exact_only: bool  # CUDA 10: no minor-version compatibility


@dataclass(frozen=True)
class ToolkitRow:
    cuda: str
    linux: str
    windows: str | None


@dataclass(frozen=True)
class DriverData:
    floors: dict[int, DriverFloor]
    toolkit_rows: tuple[ToolkitRow, ...]  # newest first
    sources: tuple[str, ...]


@dataclass(frozen=True)
class GpuData:
    families: dict[str, str]
    igpu_only: tuple[str, ...]
    names: tuple[tuple[re.Pattern[str], str], ...]
    examples: tuple[str, ...]
    first_cuda: dict[str, str]  # cc -> first CUDA toolkit that knows it (sets the oldest driver branch)


@dataclass(frozen=True)
class ErrorFamily:
    id: str
    title: str
    patterns: tuple[re.Pattern[str], ...]
    cause: str
    fix: tuple[str, ...]
    sources: tuple[str, ...]
    threads: tuple[str, ...]


def _arch(setting: str | None) -> tuple[str, ...]:
    return tuple(parse_arch_setting(setting)) if setting else ()


@functools.cache
def releases() -> tuple[Release, ...]:
    """Every known release, newest first."""
    raw = _load("torch_wheels.yaml")
    out = []
    for rel in raw["releases"]:
        variants = tuple(
            WheelVariant(
                tag=v["tag"],
                cuda=v["cuda"],
                arch_linux=_arch(v["arch"]),
                arch_windows=_arch(v.get("arch_windows") or v["arch"]),
                arch_aarch64=_arch(v["arch_aarch64"]) if v.get("arch_aarch64") else None,
                arch_confidence=v.get("arch_confidence", "build-script"),
                linux_only=v.get("platforms") == ["linux"],
                sources=tuple(v.get("src", ())),
            )
            for v in rel["variants"]
        )
        out.append(
            Release(
                version=rel["version"],
                latest=rel["latest"],
                python=tuple(rel["python"]),
                pypi_default=rel["pypi_default"],
                torchvision=rel.get("torchvision"),
                conda=bool(rel.get("conda")),
                rocm=tuple(rel.get("rocm") or ()),
                variants=variants,
                sources=tuple(rel.get("src", ())),
                notes=tuple(rel.get("notes", ())) + tuple(rel.get("decided", ())),
            )
        )
    out.sort(key=lambda r: parse_version(r.version) or (0,), reverse=True)
    return tuple(out)


def release(version: str | None) -> Release | None:
    """The release of a torch version string ('2.7.1+cu126' -> the 2.7 record)."""
    parts = parse_version(version)
    if parts is None or len(parts) < 2:
        return None
    key = f"{parts[0]}.{parts[1]}"
    return next((r for r in releases() if r.version == key), None)


@functools.cache
def torchaudio_last_tracking() -> str:
    return str(_load("torch_wheels.yaml")["torchaudio_last_tracking"])


@functools.cache
def driver_data() -> DriverData:
    raw = _load("drivers.yaml")
    floors = {}
    for key, value in raw["minor_version_compat"].items():
        if key == "src":
            continue
        floors[int(key)] = DriverFloor(
            cuda_major=int(key),
            linux=value.get("linux"),
            windows=value.get("windows"),
            exact_only=bool(value.get("exact_only")),
        )
    rows = tuple(ToolkitRow(cuda=r[0], linux=r[1], windows=r[2]) for r in raw["toolkit_driver"]["rows"])
    sources = tuple(raw["minor_version_compat"]["src"]) + tuple(raw["toolkit_driver"]["src"])
    return DriverData(floors=floors, toolkit_rows=rows, sources=sources)


@functools.cache
def gpu_data() -> GpuData:
    raw = _load("gpus.yaml")
    names = tuple((re.compile(pattern, re.IGNORECASE), cc) for pattern, cc in raw["names"])
    families = {str(k): str(v) for k, v in raw["families"].items()}
    return GpuData(
        families=families, igpu_only=tuple(raw["igpu_only"]), names=names, examples=tuple(raw["examples"]),
        first_cuda={str(k): str(v) for k, v in raw["first_cuda"].items()},
    )


@functools.cache
def error_families() -> tuple[ErrorFamily, ...]:
    raw = _load("errors.yaml")
    return tuple(
        ErrorFamily(
            id=f["id"],
            title=f["title"],
            patterns=tuple(re.compile(p) for p in f["patterns"]),
            cause=" ".join(f["cause"].split()),
            fix=tuple(" ".join(x.split()) for x in f["fix"]),
            sources=tuple(f.get("src") or ()),
            threads=tuple(f.get("threads") or ()),
        )
        for f in raw["families"]
    )


@dataclass(frozen=True)
class RocmArchList:
    """The gfx targets of one generation of official PyTorch ROCm wheels (data/rocm.yaml)."""

    id: str
    torch: tuple[str, ...]  # torch minor releases this list is pinned to by its source ("2.13"); may be empty
    min_rocm: str
    gfx: tuple[str, ...]
    sources: tuple[str, ...]


@dataclass(frozen=True)
class RocmData:
    arch_lists: tuple[RocmArchList, ...]  # oldest first; each list contains the one before it
    overrides: dict[str, tuple[str, str]]  # gfx -> (HSA_OVERRIDE_GFX_VERSION value, the target it runs as)
    override_sources: tuple[str, ...]
    products: tuple[tuple[re.Pattern[str], str], ...]  # product-name pattern -> gfx target
    product_sources: tuple[str, ...]
    mps: dict[str, Any]


@functools.cache
def rocm_data() -> RocmData:
    raw = _load("rocm.yaml")
    rocm = raw["rocm"]
    lists = tuple(
        RocmArchList(id=a["id"], torch=tuple(str(t) for t in a["torch"]), min_rocm=str(a["min_rocm"]),
                     gfx=tuple(a["gfx"]), sources=tuple(a["src"]))
        for a in rocm["wheel_arch_lists"]
    )
    return RocmData(
        arch_lists=lists,
        overrides={str(k): (str(v["value"]), str(v["as"])) for k, v in rocm["hsa_override"].items()},
        override_sources=tuple(rocm["hsa_override_src"]),
        products=tuple((re.compile(p["pattern"], re.IGNORECASE), str(p["gfx"])) for p in rocm["products"]),
        product_sources=tuple(rocm["products_src"]),
        mps=dict(raw["mps"]),
    )
