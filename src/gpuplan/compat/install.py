"""Pick the PyTorch build for a machine: the newest release whose wheels have kernels for the GPU,
run on its driver and exist for its Python -- and say why, and what that choice leaves out.

Works from an :class:`InstallRequest`, filled from the probe (``request_from_environment``) or from
values given by hand (``gpuplan install --gpu --driver --python --torch``).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.compat import dataload
from gpuplan.compat import rocm as rocm_targets
from gpuplan.compat.archcodes import cc_to_code
from gpuplan.compat.archs import ArchSupport, architecture, support
from gpuplan.compat.dataload import Release, WheelVariant
from gpuplan.compat.drivers import (
    DriverFit,
    driver_max_cuda,
    fit,
    floor_for,
    full_support_driver,
    predates_arch,
)
from gpuplan.compat.environment import Environment
from gpuplan.compat.versions import major_minor, parse_version

INDEX = "https://download.pytorch.org/whl"
# conda's pytorch-cuda metapackage existed for these CUDA versions (1.13 - 2.5; S-PREV, S-TI)
_CONDA_PYTORCH_CUDA = ("11.6", "11.7", "11.8", "12.1", "12.4")


@dataclass(frozen=True)
class InstallRequest:
    os: str  # "linux", "windows" or "macos"
    machine: str | None = None  # "x86_64", "aarch64", "arm64", "AMD64"
    python: str | None = None  # "3.11"
    gpu_name: str | None = None
    cc: str | None = None  # compute capability of the (oldest) NVIDIA GPU
    driver_version: str | None = None
    driver_cuda: str | None = None  # "CUDA Version" the driver reported, if known
    amd: bool = False  # an AMD GPU with ROCm
    torch: str | None = None  # "2.7" or "2.7.1": stay on this release
    gfx: str | None = None  # the AMD GPU's LLVM target ("gfx1100"), when known
    rocm: str | None = None  # "6.4": only wheels built for this ROCm version


@dataclass(frozen=True)
class Excluded:
    what: str  # "torch 2.15", "torch 2.14 cu130"
    reason: str


@dataclass(frozen=True)
class InstallPlan:
    ok: bool
    command: str | None
    conda_command: str | None
    torch_version: str | None
    build: str | None  # "cu126", "cpu", "rocm6.4", "pypi" (macOS / Windows CPU from PyPI)
    cuda: str | None
    reason: str
    excluded: tuple[Excluded, ...]
    notes: tuple[str, ...]
    request: InstallRequest


def request_from_environment(env: Environment, torch: str | None = None) -> InstallRequest:
    """This machine as an install request; with several NVIDIA GPUs the oldest decides."""
    nvidia = [g for g in env.nvidia.gpus if g.cc is not None] or list(env.nvidia.gpus)
    oldest = min(nvidia, key=lambda g: cc_to_code(g.cc or "") or 0) if nvidia else None
    amd_gpu = next((g for g in env.rocm.gpus if g.gfx), env.rocm.gpus[0] if env.rocm.gpus else None)
    return InstallRequest(
        os=env.platform.os_family or "linux",
        machine=env.platform.machine,
        python=major_minor(env.platform.python),
        gpu_name=oldest.name if oldest else None,
        cc=oldest.cc if oldest else None,
        driver_version=env.nvidia.driver_version,
        driver_cuda=env.nvidia.driver_cuda,
        amd=bool(env.rocm.gpus) and not env.nvidia.gpus,
        torch=torch,
        gfx=amd_gpu.gfx if amd_gpu and not env.nvidia.gpus else None,
    )


def _torchvision_pin(rel: Release) -> str:
    return f" torchvision=={rel.torchvision}.*" if rel.torchvision else " torchvision"


def _pinned_version(rel: Release, torch: str | None) -> str:
    parts = parse_version(torch)
    return torch.split("+")[0] if torch and parts and len(parts) >= 3 else rel.latest


def _candidate_releases(req: InstallRequest) -> list[Release]:
    rels = list(dataload.releases())
    if req.torch:
        want = major_minor(req.torch)
        rels = [r for r in rels if r.version == want]
    return rels


def _python_ok(rel: Release, python: str | None) -> bool:
    return python is None or python in rel.python


def _python_reason(rel: Release, python: str | None) -> str:
    return f"no wheels for Python {python} (it has {rel.python[0]}-{rel.python[-1]})"


def plan_install(req: InstallRequest) -> InstallPlan:
    """The newest build that works for ``req``; ``ok=False`` with the reasons when none does."""
    rels = _candidate_releases(req)
    if req.os == "macos":
        why = "macOS wheels on PyPI are CPU builds with the MPS (Apple GPU) backend"
        return _plan_pypi_only(req, rels, why, _mps_notes())
    if req.amd:
        return _plan_rocm(req, rels)
    if req.cc is None and req.gpu_name is None and req.driver_version is None:
        return _plan_cpu(req, rels)
    return _plan_cuda(req, rels)


def _first_release(req: InstallRequest, rels: list[Release]) -> tuple[Release | None, list[Excluded]]:
    excluded: list[Excluded] = []
    for rel in rels:
        if _python_ok(rel, req.python):
            return rel, excluded
        excluded.append(Excluded(f"torch {rel.version}", _python_reason(rel, req.python)))
    return None, excluded


def _no_plan(req: InstallRequest, reason: str, excluded: list[Excluded]) -> InstallPlan:
    return InstallPlan(False, None, None, None, None, None, reason, tuple(excluded), (), req)


def _mps_notes() -> tuple[str, ...]:
    """What the MPS backend supports (data/rocm.yaml `mps`, sourced)."""
    mps = dataload.rocm_data().mps
    return (
        f"MPS (the Apple GPU) needs macOS {mps['min_macos']} or newer and an arm64 (Apple silicon) Python; "
        "use device='mps'.",
        f"Dtypes on MPS: float32 and float16; bfloat16 from macOS {mps['bf16_min_macos']}; "
        f"{' and '.join(mps['unsupported_dtypes'])} do not run on MPS.",
        f"Memory is unified: by default PyTorch allocates up to {mps['high_watermark_ratio']} x Metal's recommended "
        "working set (PYTORCH_MPS_HIGH_WATERMARK_RATIO, at most "
        f"{mps['high_watermark_upper_bound']}; 0.0 removes the cap and can make macOS itself run out of memory).",
    )


def _plan_pypi_only(req: InstallRequest, rels: list[Release], why: str,
                    notes: tuple[str, ...] = ()) -> InstallPlan:
    rel, excluded = _first_release(req, rels)
    if rel is None:
        return _no_plan(req, f"no torch release has wheels for Python {req.python}", excluded)
    version = _pinned_version(rel, req.torch)
    command = f"pip install torch=={version}{_torchvision_pin(rel)}"
    return InstallPlan(True, command, None, version, "pypi", None, f"torch {version}: {why}.",
                       tuple(excluded), notes, req)


def _plan_cpu(req: InstallRequest, rels: list[Release]) -> InstallPlan:
    if req.os == "windows":
        return _plan_pypi_only(req, rels, "no GPU given or found; Windows wheels on PyPI are CPU builds")
    rel, excluded = _first_release(req, rels)
    if rel is None:
        return _no_plan(req, f"no torch release has wheels for Python {req.python}", excluded)
    version = _pinned_version(rel, req.torch)
    command = f"pip install torch=={version}{_torchvision_pin(rel)} --index-url {INDEX}/cpu"
    reason = (f"torch {version} CPU build: no NVIDIA or AMD GPU was given or found, so the CUDA libraries "
              f"(several GB) of the default PyPI wheel would be dead weight.")
    notes = ("With an NVIDIA GPU, pass --gpu NAME --driver VERSION to get the CUDA build.",)
    return InstallPlan(True, command, None, version, "cpu", None, reason, tuple(excluded), notes, req)


def _rocm_versions(rel: Release, want: str | None) -> tuple[str, ...]:
    """The ROCm versions of a release's wheels, only ``want`` (and its patch versions) when given."""
    if want is None:
        return rel.rocm
    return tuple(v for v in rel.rocm if v == want or v.startswith(want + "."))


def _plan_rocm(req: InstallRequest, rels: list[Release]) -> InstallPlan:
    excluded: list[Excluded] = []
    if req.os != "linux":
        return _no_plan(req, "ROCm wheels of PyTorch exist only for Linux", excluded)
    gfx = req.gfx
    override = rocm_targets.safe_override(gfx) if gfx else None
    if gfx and not rocm_targets.in_any_official_wheel(gfx) and override is None:
        return _no_plan(req, f"no official PyTorch ROCm wheel has kernels for {gfx}, and no "
                             "HSA_OVERRIDE_GFX_VERSION is safe for it: build from source with "
                             f"PYTORCH_ROCM_ARCH={gfx} or use the CPU build", excluded)
    for rel in rels:
        if not _python_ok(rel, req.python):
            excluded.append(Excluded(f"torch {rel.version}", _python_reason(rel, req.python)))
            continue
        versions = _rocm_versions(rel, req.rocm)
        if not versions:
            why = (f"no ROCm {req.rocm} wheels (it has {', '.join(rel.rocm)})" if rel.rocm and req.rocm
                   else "no ROCm wheel set recorded for this release")
            excluded.append(Excluded(f"torch {rel.version}", why))
            continue
        pinned = rocm_targets.wheel_arch_list(rel.latest)
        if gfx and pinned is not None and gfx not in pinned.gfx and override is None:
            excluded.append(Excluded(f"torch {rel.version}", f"its ROCm wheels have no {gfx} kernels"))
            continue
        version, rocm = _pinned_version(rel, req.torch), versions[-1]
        command = f"pip install torch=={version}{_torchvision_pin(rel)} --index-url {INDEX}/rocm{rocm}"
        reason = f"torch {version} for ROCm {rocm}: newest release with a ROCm wheel set in gpuplan's data"
        notes = ["Check that the GPU is on AMD's ROCm support list for that ROCm version."]
        if gfx and pinned is not None and gfx in pinned.gfx:
            reason += f" whose wheels have {gfx} kernels"
        elif gfx and override is not None and (pinned is None or gfx not in pinned.gfx):
            notes.append(f"{gfx} is in no official wheel: run with {override.variable} (it shares its "
                         f"instruction set with {override.runs_as}, which the wheels have).")
        elif gfx and pinned is None and not rocm_targets.in_every_rocm6_wheel(gfx):
            notes.append(f"gpuplan's data does not say whether this wheel has {gfx} kernels; after installing, "
                         "check with `gpuplan doctor --import-torch`.")
        return InstallPlan(True, command, None, version, f"rocm{rocm}", None, reason + ".", tuple(excluded),
                           tuple(notes), req)
    return _no_plan(req, "no release with ROCm wheels fits", excluded)


@dataclass(frozen=True)
class _Choice:
    variant: WheelVariant
    arch: ArchSupport
    driver: DriverFit


def _judge(req: InstallRequest, rel: Release, v: WheelVariant) -> _Choice | str:
    """A usable variant, or the reason it is not."""
    windows = req.os == "windows"
    if windows and v.linux_only:
        return "Linux only"
    arch_list = list(v.arch_for(req.os, req.machine))
    arch = support(req.cc, arch_list) if req.cc else ArchSupport.UNKNOWN
    if arch is ArchSupport.NONE:
        listed = " ".join(arch_list)
        return f"no kernels for sm_{cc_to_code(req.cc or '')} (has {listed})"
    driver = fit(v.cuda, req.driver_version, req.driver_cuda, windows)
    if driver is DriverFit.TOO_OLD:
        need = floor_for(v.cuda, windows) or f"CUDA {v.cuda} support"
        have = req.driver_version or f"for CUDA {req.driver_cuda}"
        return f"CUDA {v.cuda} needs driver >= {need}; driver {have} is older"
    return _Choice(v, arch, driver)


def _score(rel: Release, c: _Choice) -> tuple[bool, bool, bool, tuple[int, ...]]:
    return (
        c.arch is not ArchSupport.PTX_ONLY,
        c.driver is not DriverFit.MINOR_COMPAT,
        c.variant.tag == rel.pypi_default,
        parse_version(c.variant.cuda) or (0,),
    )


def driver_predates_gpu(req: InstallRequest) -> str | None:
    """Why no build can run: the driver's branch is older than the GPU's architecture; None if not so."""
    windows = req.os == "windows"
    floor = predates_arch(req.cc, req.driver_version, req.driver_cuda, windows)
    if floor is None or req.cc is None:
        return None
    need_driver, need_cuda = floor
    have = f"driver {req.driver_version}" if req.driver_version else f"the driver (CUDA {req.driver_cuda})"
    arch = f"sm_{cc_to_code(req.cc)}, {architecture(req.cc) or 'unknown architecture'}"
    gpu = f"{req.gpu_name} ({arch})" if req.gpu_name else f"{arch} GPUs"
    return (f"{have} predates {gpu}: "
            f"its first driver branch is R{need_driver.split('.')[0]} (CUDA {need_cuda}), so no PyTorch build "
            f"can use the GPU on this driver; upgrade the driver to >= {need_driver}")


def _plan_cuda(req: InstallRequest, rels: list[Release]) -> InstallPlan:
    excluded: list[Excluded] = []
    too_old = driver_predates_gpu(req)
    if too_old is not None:
        return _no_plan(req, too_old, excluded)
    if req.cc is None and req.gpu_name is not None:
        why = f"compute capability of {req.gpu_name!r} unknown: not checked"
        excluded.append(Excluded("arch check", why))
    for rel in rels:
        if not _python_ok(rel, req.python):
            excluded.append(Excluded(f"torch {rel.version}", _python_reason(rel, req.python)))
            continue
        choices, rejected = [], []
        for v in rel.variants:
            verdict = _judge(req, rel, v)
            if isinstance(verdict, str):
                rejected.append(Excluded(f"torch {rel.version} {v.tag}", verdict))
            else:
                choices.append(verdict)
        if not choices:
            excluded.append(Excluded(f"torch {rel.version}", "; ".join(f"{e.what.split()[-1]}: {e.reason}"
                                                                     for e in rejected)))
            continue
        best = max(choices, key=lambda c: _score(rel, c))
        for c in choices:
            if c is not best:
                why = "the PyPI default" if c.variant.tag == rel.pypi_default else "not preferred"
                excluded.append(Excluded(f"torch {rel.version} {c.variant.tag}", f"also works; {why}"))
        excluded += rejected
        return _cuda_plan(req, rel, best, excluded)
    gpu = f"{req.gpu_name or 'the GPU'} (sm_{cc_to_code(req.cc)})" if req.cc else (req.gpu_name or "the GPU")
    return _no_plan(req, f"no official PyTorch wheel in gpuplan's data runs on {gpu} with this driver and "
                         f"Python; build from source with TORCH_CUDA_ARCH_LIST, upgrade the driver, "
                         f"or use the CPU build", excluded)


def _cuda_plan(req: InstallRequest, rel: Release, c: _Choice, excluded: list[Excluded]) -> InstallPlan:
    v = c.variant
    version = _pinned_version(rel, req.torch)
    old_style = (parse_version(rel.version) or (0,)) < (2, 0)  # 1.12/1.13 used +cuXXX and --extra-index-url
    if old_style:
        command = (f"pip install torch=={version}+{v.tag}{_torchvision_pin(rel)} "
                   f"--extra-index-url {INDEX}/{v.tag}")
    elif req.os == "linux" and (req.machine in (None, "x86_64", "AMD64")) and v.tag == rel.pypi_default:
        command = f"pip install torch=={version}{_torchvision_pin(rel)}"
    else:
        command = f"pip install torch=={version}{_torchvision_pin(rel)} --index-url {INDEX}/{v.tag}"
    conda = None
    if rel.conda and v.cuda in _CONDA_PYTORCH_CUDA and (parse_version(rel.version) or (0,)) >= (1, 13):
        tv = f" torchvision={rel.torchvision}" if rel.torchvision else ""
        conda = f"conda install pytorch=={version}{tv} pytorch-cuda={v.cuda} -c pytorch -c nvidia"
    parts = [f"torch {version} {v.tag}"]
    if req.cc:
        arch_name = architecture(req.cc) or "unknown architecture"
        how = "native kernels" if c.arch is ArchSupport.NATIVE else "PTX only (JIT-compiled on first use)"
        parts.append(f"{how} for sm_{cc_to_code(req.cc)} ({arch_name})")
    windows = req.os == "windows"
    supported = req.driver_cuda or driver_max_cuda(req.driver_version, windows)
    if c.driver is DriverFit.FULL:
        driver = f"driver {req.driver_version}" if req.driver_version else "the driver"
        parts.append(f"{driver} supports CUDA {supported} >= {v.cuda}")
    elif c.driver is DriverFit.MINOR_COMPAT:
        parts.append(f"CUDA {v.cuda} runs on driver {req.driver_version} (CUDA {supported}) through NVIDIA "
                     f"minor-version compatibility (floor {floor_for(v.cuda, windows)}); full support needs "
                     f"driver >= {full_support_driver(v.cuda, windows)}")
    else:
        parts.append(f"driver unknown: CUDA {v.cuda} needs driver >= {floor_for(v.cuda, windows)}")
    notes = []
    if v.arch_confidence != "build-script":
        how = v.arch_confidence
        notes.append(f"The {rel.version} {v.tag} arch list is {how}, not from the build script.")
    if not rel.conda:
        notes.append("No conda command: the pytorch conda channel's last release was 2.5 (S-ISS-138506); "
                     "inside a conda env use the pip command.")
    return InstallPlan(True, command, conda, version, v.tag, v.cuda, "; ".join(parts) + ".",
                       tuple(excluded), tuple(notes), req)
