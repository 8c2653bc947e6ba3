"""Compatibility rules: an :class:`Environment` in, :class:`Finding` records out.

Each rule is a small function over the probed facts and the data files; ``diagnose`` runs them all.
Rules only state what the facts support: a fact the probe could not read makes a rule stay silent
(the report shows it as unknown) instead of guessing.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from gpuplan.compat import dataload
from gpuplan.compat.archs import ArchSupport, architecture, cc_to_code, support
from gpuplan.compat.drivers import DriverFit, fit, floor_for, full_support_driver
from gpuplan.compat.environment import Environment, GpuInfo
from gpuplan.compat.findings import Finding, Severity, sort_findings
from gpuplan.compat.install import plan_install, request_from_environment
from gpuplan.compat.versions import local_tag, major_minor, parse_version
from gpuplan.compat.visible import visibility
from gpuplan.units import GIB, format_bytes

Rule = Callable[[Environment], list[Finding]]


def _sm(cc: str | None) -> str:
    return f"sm_{cc_to_code(cc)}" if cc else "unknown"


def _gpu_label(gpu: GpuInfo, indices: list[int] | None = None) -> str:
    arch = architecture(gpu.cc)
    cc = f"{_sm(gpu.cc)}, {arch}" if arch else _sm(gpu.cc)
    which = f"GPUs {', '.join(map(str, indices))}" if indices and len(indices) > 1 else f"GPU {gpu.index}"
    return f"{which} {gpu.name or '(name unknown)'} ({cc})"


def _distinct_gpus(gpus: tuple[GpuInfo, ...]) -> list[tuple[GpuInfo, list[int]]]:
    """Identical GPUs (same name and capability) grouped, so eight H100s give one finding, not eight."""
    groups: dict[tuple[str | None, str | None], tuple[GpuInfo, list[int]]] = {}
    for gpu in gpus:
        groups.setdefault((gpu.name, gpu.cc), (gpu, []))[1].append(gpu.index)
    return list(groups.values())


def _install_hint(env: Environment, torch: str | None = None) -> str:
    plan = plan_install(request_from_environment(env, torch))
    if not plan.ok or plan.command is None:
        return f"no official wheel fits ({plan.reason})"
    return plan.command


def _is_windows(env: Environment) -> bool:
    return env.platform.system == "Windows"


def rule_no_gpu(env: Environment) -> list[Finding]:
    if env.nvidia.gpus or env.rocm.gpus:
        return []
    problem = env.nvidia.problem
    # NVML's "Library Not Found" means no driver at all; any other NVML or nvidia-smi failure means the
    # user-space driver is there but cannot reach the kernel driver
    if problem and (env.nvidia.smi_present or "Library Not Found" not in problem):
        tool = "nvidia-smi" if env.nvidia.smi_present else "The NVIDIA driver library (NVML)"
        return [Finding(
            Severity.ERROR, "DRIVER_NOT_WORKING",
            f"{tool} is installed but failed: {problem!r}. The NVIDIA kernel driver is not "
            "loaded or does not match the installed user-space tools, so CUDA cannot see any GPU.",
            "Reboot after a driver or kernel update; if that does not help, reinstall the driver for the "
            "running "
            "kernel. In a container, start it with --gpus all (NVIDIA Container Toolkit).",
        )]
    if env.platform.system == "Darwin":
        mps = env.mps or "unknown"
        return [Finding(
            Severity.INFO, "MACOS_NO_CUDA",
            f"macOS has no CUDA: PyTorch uses the Apple GPU through the 'mps' device (MPS: {mps}).",
            "Use torch.device('mps') instead of 'cuda'; gpuplan's estimates for NVIDIA GPUs still work here.",
        )]
    where = "WSL: " if env.platform.wsl else ""
    nothing = "No NVIDIA driver (no NVML library, no nvidia-smi) and no ROCm GPU were found"
    if env.nvidia.driver_version:
        nothing = (f"The NVIDIA driver {env.nvidia.driver_version} is installed but lists no GPU, and no "
                   "ROCm GPU was found")
    elif env.nvidia.smi_present:
        nothing = "nvidia-smi ran but listed no NVIDIA GPU, and no ROCm GPU was found"
    meaning = ("PyTorch can only use the CPU on this machine: torch.cuda.is_available() is False. "
               "gpuplan estimate / fit / plan still work, because they simulate the target GPU.")
    if env.torch.build == "cuda":
        meaning += f" The installed torch {env.torch.version} is a CUDA build; here it runs on the CPU only."
    fix = ("Nothing to fix on a CPU-only machine. To use an NVIDIA GPU, install its driver "
           "(then `gpuplan install` prints the matching PyTorch command).")
    if env.platform.wsl:
        fix = ("Install the NVIDIA driver in Windows (not inside WSL) and run `wsl --update`; WSL exposes "
               "the Windows driver as /usr/lib/wsl/lib/libcuda.so.")
    return [Finding(Severity.INFO, "NO_GPU", f"{where}{nothing}. {meaning}", fix)]


def rule_torch_missing(env: Environment) -> list[Finding]:
    if env.torch.installed:
        if env.torch.import_error:
            return [Finding(
                Severity.ERROR, "TORCH_IMPORT_FAILED",
                f"torch {env.torch.version} is installed but `import torch` fails: {env.torch.import_error}",
                "Reinstall torch in a clean virtual environment with the command from `gpuplan install`.",
            )]
        return []
    return [Finding(
        Severity.INFO, "TORCH_NOT_INSTALLED", "PyTorch is not installed in this Python environment.",
        f"Install it with: {_install_hint(env)}",
    )]


def rule_wrong_build(env: Environment) -> list[Finding]:
    t = env.torch
    if not t.installed:
        return []
    out = []
    if t.build == "cpu" and env.nvidia.gpus:
        gpu = env.nvidia.gpus[0]
        out.append(Finding(
            Severity.ERROR, "CPU_WHEEL_WITH_GPU",
            f"torch {t.version} is a CPU-only build, but {_gpu_label(gpu)} is present: PyTorch cannot use it "
            "('Torch not compiled with CUDA enabled'). On Windows and macOS a plain `pip install torch` from "
            "PyPI always gives the CPU build.",
            f"pip uninstall torch torchvision torchaudio, then: {_install_hint(env)}",
            ("S-TI",),
        ))
    if t.build == "cuda" and not env.nvidia.gpus and env.rocm.gpus:
        out.append(Finding(
            Severity.ERROR, "CUDA_WHEEL_ON_AMD",
            f"torch {t.version} is a CUDA build, but the GPU is AMD ({env.rocm.gpus[0].name}): "
            "it needs the ROCm build.",
            f"pip uninstall torch, then: {_install_hint(env)}",
        ))
    if t.build == "rocm" and env.nvidia.gpus and not env.rocm.gpus:
        out.append(Finding(
            Severity.ERROR, "ROCM_WHEEL_ON_NVIDIA",
            f"torch {t.version} is a ROCm build, but the GPU is NVIDIA ({_gpu_label(env.nvidia.gpus[0])}).",
            f"pip uninstall torch, then: {_install_hint(env)}",
        ))
    return out


def rule_driver(env: Environment) -> list[Finding]:
    t, nv = env.torch, env.nvidia
    if t.build != "cuda" or not t.cuda or not nv.gpus:
        return []
    windows = _is_windows(env)
    verdict = fit(t.cuda, nv.driver_version, nv.driver_cuda, windows)
    have = f"driver {nv.driver_version or 'unknown'} (supports CUDA {nv.driver_cuda or 'unknown'})"
    if verdict is DriverFit.TOO_OLD:
        floor = floor_for(t.cuda, windows)
        found = ""
        cuda_parts = parse_version(nv.driver_cuda)
        if cuda_parts and len(cuda_parts) >= 2:
            found = f" (found version {cuda_parts[0] * 1000 + cuda_parts[1] * 10})"
        return [Finding(
            Severity.ERROR, "DRIVER_TOO_OLD",
            f"torch {t.version} is built with CUDA {t.cuda}, which needs an NVIDIA driver >= {floor}; "
            f"{have} is "
            f"older, so CUDA cannot initialise: torch.cuda.is_available() is False and CUDA use raises 'The "
            f"NVIDIA driver on your system is too old{found}'.",
            f"Upgrade the driver to >= {floor}, or install a build for the CUDA this driver supports: "
            f"{_install_hint(env)}",
            ("S-NV-MVC", "S-PT-CUDAFUNCTIONS"),
        )]
    if verdict is DriverFit.MINOR_COMPAT:
        full = full_support_driver(t.cuda, windows)
        return [Finding(
            Severity.WARNING, "DRIVER_MINOR_COMPAT",
            f"torch {t.version} is built with CUDA {t.cuda}; {have} is older than CUDA {t.cuda} but at or "
            "above "
            f"the CUDA {t.cuda.split('.')[0]}.x floor ({floor_for(t.cuda, windows)}), so it runs through "
            "NVIDIA "
            "minor-version compatibility, which NVIDIA documents as a limited feature set (PTX JIT of newer "
            "PTX fails). Whether every PyTorch op works this way is not verified.",
            f"Upgrade the driver to >= {full} for full CUDA {t.cuda} support, or keep this driver and accept "
            "the limitation.",
            ("S-NV-MVC", "S-NV-RN132U2"),
        )]
    return []


def _covering(cc: str, rel: dataload.Release, windows: bool, machine: str | None = None) -> list[str]:
    os_family = "windows" if windows else "linux"
    return [
        v.tag for v in rel.variants
        if support(cc, list(v.arch_for(os_family, machine))) is not ArchSupport.NONE
    ]


def _last_release_for(
    cc: str, windows: bool, machine: str | None = None
) -> tuple[dataload.Release, str] | None:
    for rel in dataload.releases():
        tags = _covering(cc, rel, windows, machine)
        if tags:
            return rel, tags[0]
    return None


def rule_arch(env: Environment) -> list[Finding]:
    t = env.torch
    if t.build != "cuda" or not env.nvidia.gpus:
        return []
    out = []
    windows = _is_windows(env)
    rel = dataload.release(t.version)
    listed = " ".join(t.arch_list) if t.arch_list else "unknown"
    for gpu, indices in _distinct_gpus(env.nvidia.gpus):
        if gpu.cc is None:
            out.append(Finding(
                Severity.INFO, "GPU_CC_UNKNOWN",
                f"Compute capability of GPU {gpu.index} ({gpu.name or 'name unknown'}) is unknown (neither "
                "the "
                "driver nor gpuplan's name table gave it), so the wheel's arch list could not be checked.",
                "Run `nvidia-smi --query-gpu=name,compute_cap --format=csv` and pass it to `gpuplan install "
                "--gpu`.",
            ))
            continue
        verdict = support(gpu.cc, list(t.arch_list) if t.arch_list else None)
        if verdict is ArchSupport.UNKNOWN and not out_has(out, "ARCH_LIST_UNKNOWN"):
            out.append(Finding(
                Severity.INFO, "ARCH_LIST_UNKNOWN",
                f"The kernel (arch) list of torch {t.version} is not known without importing torch (it is "
                "not an "
                "official release wheel in gpuplan's data), so whether it has kernels for "
                f"{_gpu_label(gpu, indices)} was not checked.",
                "Run `gpuplan doctor --import-torch` to read torch.cuda.get_arch_list().",
            ))
            continue
        src = f" [{t.arch_list_source}]" if t.arch_list_source else ""
        if verdict is ArchSupport.NONE:
            out.append(_arch_missing(env, gpu, indices, rel, listed + src, windows))
        elif verdict is ArchSupport.PTX_ONLY:
            out.append(Finding(
                Severity.WARNING, "ARCH_PTX_ONLY",
                f"{_gpu_label(gpu, indices)} has no compiled kernels in torch {t.version} (arch list: "
                f"{listed}{src}); it "
                "runs on PTX JIT-compiled by the driver: slow first use, and it needs a driver that fully "
                "supports the wheel's CUDA version.",
                f"Prefer a build with native kernels for {_sm(gpu.cc)}: {_install_hint(env)}",
                ("S-CNBLOGS-BINCOMPAT",),
            ))
        elif verdict is ArchSupport.NATIVE:
            out += _arch_support_ends(gpu, indices, rel, windows, env.platform.machine)
    return out


def out_has(findings: list[Finding], code: str) -> bool:
    return any(f.code == code for f in findings)


def _arch_missing(env: Environment, gpu: GpuInfo, indices: list[int], rel: dataload.Release | None,
                  listed: str, windows: bool) -> Finding:
    t = env.torch
    head = (f"{_gpu_label(gpu, indices)} has no kernels in torch {t.version} (arch list: {listed}); "
            "CUDA ops fail with 'no kernel image is available for execution on the device'.")
    machine = env.platform.machine
    other = _covering(gpu.cc or "", rel, windows, machine) if rel else []
    if rel is not None and other:
        return Finding(
            Severity.ERROR, "ARCH_NOT_IN_WHEEL",
            f"{head} Another CUDA build of the same release has them: {', '.join(other)}.",
            f"Reinstall from an index with {_sm(gpu.cc)} kernels: {_install_hint(env, t.version)}",
            ("S-TORCH213",),
        )
    last = _last_release_for(gpu.cc or "", windows, machine)
    newest = dataload.releases()[0]
    if last is None:
        why = f"No release in gpuplan's data (up to {newest.version}) has kernels for {_sm(gpu.cc)}."
    elif (parse_version(last[0].version) or (0,)) < (parse_version(t.version) or (0,)):
        why = (f"This release dropped {architecture(gpu.cc) or _sm(gpu.cc)}: the last release with kernels "
               f"for it is torch {last[0].version} ({last[1]}).")
    else:
        oldest_first = reversed(dataload.releases())
        cc = gpu.cc or ""
        first = next((r, tags[0]) for r in oldest_first if (tags := _covering(cc, r, windows, machine)))
        why = (f"The GPU is newer than this release: the first release with {_sm(gpu.cc)} kernels is torch "
               f"{first[0].version} ({first[1]}).")
    return Finding(
        Severity.ERROR, "ARCH_NOT_IN_RELEASE", f"{head} {why}",
        f"Install a release that has them: {_install_hint(env)}", ("S-TORCH213", "S-DEVDISCUSS-CU126"),
    )


def _arch_support_ends(
    gpu: GpuInfo, indices: list[int], rel: dataload.Release | None, windows: bool, machine: str | None
) -> list[Finding]:
    last = _last_release_for(gpu.cc or "", windows, machine)
    newest = dataload.releases()[0]
    if last is None or rel is None or last[0].version == newest.version:
        return []
    nxt = next(r.version for r in reversed(dataload.releases())
               if (parse_version(r.version) or (0,)) > (parse_version(last[0].version) or (0,)))
    return [Finding(
        Severity.WARNING, "ARCH_SUPPORT_ENDS",
        f"{_gpu_label(gpu, indices)} is supported up to torch {last[0].version} ({last[1]}); torch {nxt} "
        "and later ship no kernels for it, so an unpinned upgrade breaks CUDA on this GPU.",
        f"Pin 'torch<{nxt}' (and install from the {last[1]} index).",
        ("S-DEVDISCUSS-CU126", "S-ISS-172352"),
    )]


def rule_companions(env: Environment) -> list[Finding]:
    t = env.torch
    if not t.installed or not t.version:
        return []
    rel = dataload.release(t.version)
    if rel is None:
        newest = dataload.releases()[0].version
        return [Finding(
            Severity.INFO, "TORCH_NOT_IN_DATA",
            f"torch {t.version} is not in gpuplan's compatibility data (it covers 1.12 - {newest}); checks "
            "that "
            "need the release's wheel facts were skipped.",
            "Nothing to do; update gpuplan for newer data.",
        )]
    out = []
    tv = major_minor(t.torchvision)
    if t.torchvision and rel.torchvision and tv != rel.torchvision:
        out.append(Finding(
            Severity.ERROR, "TORCHVISION_MISMATCH",
            f"torchvision {t.torchvision} does not belong with torch {t.version}: torch {rel.version} pairs "
            "with "
            f"torchvision {rel.torchvision}.x. Its compiled ops (nms, roi_align ...) fail to load or pip "
            "pulls "
            "another torch.",
            f"pip install torchvision=={rel.torchvision}.* from the same index as torch.",
            ("S-VISION",),
        ))
    if t.torchvision and local_tag(t.torchvision) and local_tag(t.version) \
            and local_tag(t.torchvision) != local_tag(t.version):
        out.append(Finding(
            Severity.ERROR, "TORCHVISION_BUILD_MISMATCH",
            f"torch is +{local_tag(t.version)} but torchvision is +{local_tag(t.torchvision)}: builds for "
            "different CUDA versions do not load together.",
            "Reinstall torch and torchvision together from one index (see `gpuplan install`).",
        ))
    out += _torchaudio(t.version, t.torchaudio)
    return out


def _torchaudio(torch_version: str, torchaudio: str | None) -> list[Finding]:
    if not torchaudio:
        return []
    torch_mm, audio_mm = parse_version(torch_version), parse_version(torchaudio)
    if torch_mm is None or audio_mm is None:
        return []
    if torch_mm[0] == 1:
        expected = f"0.{torch_mm[1]}"
    elif torch_mm[:2] <= (parse_version(dataload.torchaudio_last_tracking()) or (0,)):
        expected = f"{torch_mm[0]}.{torch_mm[1]}"
    else:
        if audio_mm[:2] > torch_mm[:2]:
            return [Finding(
                Severity.ERROR, "TORCHAUDIO_MISMATCH",
                f"torchaudio {torchaudio} is newer than torch {torch_version}.",
                "Install the torchaudio release made for your torch, or drop torchaudio if unused.",
            )]
        return [Finding(
            Severity.INFO, "TORCHAUDIO_UNVERIFIED",
            f"torchaudio {torchaudio} with torch {torch_version}: torchaudio stopped following torch's "
            "version "
            f"after {dataload.torchaudio_last_tracking()} (it is in maintenance); this pairing is not "
            "verified.",
            "If `import torchaudio` fails, drop torchaudio or pin torch to its release.",
            ("S-AWS-DLC-6231",),
        )]
    if f"{audio_mm[0]}.{audio_mm[1] if len(audio_mm) > 1 else 0}" != expected:
        return [Finding(
            Severity.ERROR, "TORCHAUDIO_MISMATCH",
            f"torchaudio {torchaudio} does not belong with torch {torch_version} (expected torchaudio "
            f"{expected}.x).",
            f"pip install torchaudio=={expected}.* from the same index as torch.",
            ("S-TI-RELMAT",),
        )]
    return []


def rule_local_toolkit(env: Environment) -> list[Finding]:
    t, nvcc = env.torch, env.toolkit.nvcc_version
    if t.build != "cuda" or not t.cuda or not nvcc:
        return []
    torch_v, nvcc_v = parse_version(t.cuda), parse_version(nvcc)
    if not torch_v or not nvcc_v or torch_v[:2] == nvcc_v[:2]:
        return []
    only = ("This matters only for building CUDA extensions (torch.utils.cpp_extension, pip installs that "
            "compile); running PyTorch uses the CUDA runtime inside the wheel.")
    if torch_v[0] != nvcc_v[0]:
        return [Finding(
            Severity.WARNING, "LOCAL_CUDA_MISMATCH",
            f"The local CUDA toolkit (nvcc {nvcc}) differs in major version from torch's CUDA {t.cuda}: "
            "building "
            f"an extension fails with 'The detected CUDA version ({nvcc}) mismatches the version that was "
            "used "
            f"to compile PyTorch ({t.cuda})'. {only}",
            f"Point CUDA_HOME at a CUDA {torch_v[0]}.x toolkit before building extensions, or install the "
            "torch "
            "build that matches the toolkit.",
            ("S-TORCH2141-CPPEXT",),
        )]
    return [Finding(
        Severity.INFO, "LOCAL_CUDA_MINOR_MISMATCH",
        f"The local CUDA toolkit (nvcc {nvcc}) and torch's CUDA {t.cuda} differ in minor version; "
        f"cpp_extension only warns about that. {only}",
        "Nothing to do unless an extension build fails.",
        ("S-TORCH2141-CPPEXT",),
    )]


_CUDA_DIR = re.compile(r"cuda[-_]?(\d+(?:\.\d+)?)", re.IGNORECASE)


def rule_library_path(env: Environment) -> list[Finding]:
    if env.platform.system != "Linux":
        return []
    entries = [e for e in env.env_vars.get("LD_LIBRARY_PATH", "").split(":") if e]
    cuda_dirs = [e for e in entries if "cuda" in e.lower() and "wsl" not in e.lower()]
    cudnn_dirs = [e for e in entries if "cudnn" in e.lower()]
    versions = sorted({m.group(1) for e in cuda_dirs if (m := _CUDA_DIR.search(e))})
    out = []
    if len(versions) > 1 or len(cudnn_dirs) > 1:
        out.append(Finding(
            Severity.WARNING, "MULTIPLE_CUDA_LIBS",
            "LD_LIBRARY_PATH holds several CUDA/cuDNN library folders "
            f"({', '.join(cuda_dirs + cudnn_dirs)}); "
            "the loader takes each library from the first folder that has it, so versions mix.",
            "Keep at most one CUDA folder on LD_LIBRARY_PATH (or none: pip wheels bring their own "
            "libraries).",
            ("S-ISS-119989",),
        ))
    pip_libs = env.torch.build == "cuda" and (env.torch.cudnn_source or "").startswith("pip package")
    if pip_libs and (cuda_dirs or cudnn_dirs):
        out.append(Finding(
            Severity.WARNING, "SYSTEM_CUDA_ON_LIBRARY_PATH",
            f"torch {env.torch.version} brings its own CUDA/cuDNN as pip packages, but LD_LIBRARY_PATH also "
            f"lists {', '.join(cuda_dirs + cudnn_dirs)}: a system cuDNN there can be loaded instead of the "
            "wheel's (undefined symbol / CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH errors).",
            "unset LD_LIBRARY_PATH (or remove the CUDA folders from it) when running PyTorch.",
            ("S-ISS-119989", "S-ISS-188892"),
        ))
    return out


def rule_mig(env: Environment) -> list[Finding]:
    out = []
    for gpu in env.nvidia.gpus:
        if not gpu.mig_mode:
            continue
        if gpu.mig_devices == 0:
            out.append(Finding(
                Severity.ERROR, "MIG_NO_INSTANCE",
                f"MIG is enabled on {_gpu_label(gpu)} but no MIG instance exists: CUDA sees no usable device "
                "on it.",
                f"Create instances (sudo nvidia-smi mig -i {gpu.index} -cgi <profile> -C) or disable MIG "
                f"(sudo nvidia-smi -i {gpu.index} -mig 0, then reset the GPU).",
            ))
        else:
            count = "an unknown number of" if gpu.mig_devices is None else str(gpu.mig_devices)
            out.append(Finding(
                Severity.INFO, "MIG_ENABLED",
                f"MIG is enabled on {_gpu_label(gpu)} with {count} instance(s): a process uses one MIG "
                "instance, "
                "with only that instance's share of memory and SMs.",
                "Select the instance with CUDA_VISIBLE_DEVICES=MIG-<uuid> (`nvidia-smi -L` lists them); plan "
                "memory against the instance size, not the whole GPU.",
            ))
    return out


def rule_visible_devices(env: Environment) -> list[Finding]:
    value = env.env_vars.get("CUDA_VISIBLE_DEVICES")
    count = len(env.nvidia.gpus)
    if value is None or count == 0:
        return []
    seen = visibility(value, count)
    src = ("S-TORCH2141-VISIBLE",)
    why = {
        "empty": "it is empty",
        "repeated": "an entry is repeated, which makes the whole list empty",
        "invalid": "an entry is negative or not a number, which ends the list",
        "missing-index": f"it names a GPU index that does not exist ({count} GPU(s)), which ends the list",
    }
    if seen.visible == 0:
        return [Finding(
            Severity.WARNING, "GPUS_HIDDEN",
            f"CUDA_VISIBLE_DEVICES={value!r} hides all {count} GPU(s) from CUDA because "
            f"{why.get(seen.reason or '', 'of its value')}: torch.cuda.device_count() is 0.",
            "unset CUDA_VISIBLE_DEVICES, or set it to distinct GPU indices (e.g. 0,1) or UUIDs from "
            "nvidia-smi -L.",
            src,
        )]
    if seen.visible is not None and seen.reason is not None:
        return [Finding(
            Severity.WARNING, "GPUS_HIDDEN",
            f"CUDA_VISIBLE_DEVICES={value!r}: {why[seen.reason]}, so only {seen.visible} of the "
            f"{seen.listed} listed GPU(s) are visible.",
            f"Use distinct indices 0-{count - 1} (or UUIDs from nvidia-smi -L).",
            src,
        )]
    if seen.visible is not None and seen.visible < count:
        return [Finding(
            Severity.INFO, "GPUS_SUBSET",
            f"CUDA_VISIBLE_DEVICES={value!r}: {seen.visible} of {count} GPUs are visible to CUDA "
            "(renumbered from 0).",
            "Nothing to do if intended.",
            src,
        )]
    return []


def rule_alloc_conf(env: Environment) -> list[Finding]:
    cuda_conf = env.env_vars.get("PYTORCH_CUDA_ALLOC_CONF")
    new_conf = env.env_vars.get("PYTORCH_ALLOC_CONF")
    if cuda_conf is not None and new_conf is not None and cuda_conf != new_conf:
        return [Finding(
            Severity.WARNING, "ALLOC_CONF_CONFLICT",
            f"PYTORCH_CUDA_ALLOC_CONF={cuda_conf!r} and PYTORCH_ALLOC_CONF={new_conf!r} disagree. "
            "Recent torch (the shared c10 AllocatorConfig, present in 2.14.1) reads PYTORCH_ALLOC_CONF "
            "and ignores PYTORCH_CUDA_ALLOC_CONF when both are set; older torch reads only "
            "PYTORCH_CUDA_ALLOC_CONF. The first release with the new rule was not pinned down by gpuplan.",
            "Set only one of them: PYTORCH_ALLOC_CONF for recent torch, PYTORCH_CUDA_ALLOC_CONF for older.",
            ("S-PT-ALLOCCONF",),
        )]
    return []


def rule_gpu_busy(env: Environment) -> list[Finding]:
    out = []
    for gpu in env.nvidia.gpus:
        used, total = gpu.memory_used_bytes, gpu.memory_total_bytes
        if used is None or not total or used < total // 4 or used < GIB:
            continue
        procs = f" by {gpu.processes} process(es)" if gpu.processes else ""
        out.append(Finding(
            Severity.INFO, "GPU_MEMORY_IN_USE",
            f"GPU {gpu.index} already has {format_bytes(used)} of {format_bytes(total)} in use{procs}; that "
            "memory is not available to a new PyTorch process.",
            "Stop the other processes (nvidia-smi lists them) or plan with the free memory only.",
        ))
    return out


RULES: tuple[Rule, ...] = (
    rule_no_gpu,
    rule_torch_missing,
    rule_wrong_build,
    rule_driver,
    rule_arch,
    rule_companions,
    rule_local_toolkit,
    rule_library_path,
    rule_mig,
    rule_visible_devices,
    rule_alloc_conf,
    rule_gpu_busy,
)


def diagnose(env: Environment) -> list[Finding]:
    """Every finding for ``env``, errors first."""
    findings: list[Finding] = []
    for rule in RULES:
        findings += rule(env)
    return sort_findings(findings)
