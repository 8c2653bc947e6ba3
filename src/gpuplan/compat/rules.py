"""Compatibility rules: an :class:`Environment` in, :class:`Finding` records out.

Each rule is a small function over the probed facts and the data files; ``diagnose`` runs them all.
Rules only state what the facts support: a fact the probe could not read makes a rule stay silent
(the report shows it as unknown) instead of guessing.
"""

from __future__ import annotations

import re

from gpuplan.compat import dataload
from gpuplan.compat.drivers import DriverFit, fit, floor_for, full_support_driver, predates_arch
from gpuplan.compat.environment import Environment
from gpuplan.compat.findings import Finding, Severity, sort_findings
from gpuplan.compat.rulekit import Rule, distinct_gpus, gpu_label, install_hint, is_windows
from gpuplan.compat.rules_arch import rule_arch, rule_arch_data_check
from gpuplan.compat.rules_rocm import rule_hsa_override, rule_mps, rule_rocm_arch
from gpuplan.compat.versions import local_tag, major_minor, parse_version
from gpuplan.compat.visible import visibility
from gpuplan.units import GIB, format_bytes


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
        f"Install it with: {install_hint(env)}",
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
            f"torch {t.version} is a CPU-only build, but {gpu_label(gpu)} is present: PyTorch cannot use it "
            "('Torch not compiled with CUDA enabled'). On Windows and macOS a plain `pip install torch` from "
            "PyPI always gives the CPU build.",
            f"pip uninstall torch torchvision torchaudio, then: {install_hint(env)}",
            ("S-TI",),
        ))
    if t.build == "cuda" and not env.nvidia.gpus and env.rocm.gpus:
        out.append(Finding(
            Severity.ERROR, "CUDA_WHEEL_ON_AMD",
            f"torch {t.version} is a CUDA build, but the GPU is AMD ({env.rocm.gpus[0].name}): "
            "it needs the ROCm build.",
            f"pip uninstall torch, then: {install_hint(env)}",
        ))
    if t.build == "rocm" and env.nvidia.gpus and not env.rocm.gpus:
        out.append(Finding(
            Severity.ERROR, "ROCM_WHEEL_ON_NVIDIA",
            f"torch {t.version} is a ROCm build, but the GPU is NVIDIA ({gpu_label(env.nvidia.gpus[0])}).",
            f"pip uninstall torch, then: {install_hint(env)}",
        ))
    return out


def rule_driver(env: Environment) -> list[Finding]:
    t, nv = env.torch, env.nvidia
    if t.build != "cuda" or not t.cuda or not nv.gpus:
        return []
    windows = is_windows(env)
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
            f"{install_hint(env)}",
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


def rule_driver_predates_gpu(env: Environment) -> list[Finding]:
    """A driver branch older than a GPU's architecture runs it with no build at all (RTX 50 on R560)."""
    nv = env.nvidia
    windows = is_windows(env)
    out = []
    for gpu, indices in distinct_gpus(nv.gpus):
        floor = predates_arch(gpu.cc, nv.driver_version, nv.driver_cuda, windows)
        if floor is None:
            continue
        need_driver, need_cuda = floor
        have = f"driver {nv.driver_version}" if nv.driver_version else f"the driver (CUDA {nv.driver_cuda})"
        out.append(Finding(
            Severity.ERROR, "DRIVER_PREDATES_GPU",
            f"{have} is of a branch older than {gpu_label(gpu, indices)}: its architecture arrived with CUDA "
            f"{need_cuda} and driver branch R{need_driver.split('.')[0]}, so no PyTorch build can use it here.",
            f"Upgrade the NVIDIA driver to >= {need_driver}.",
            ("S-LLVM-CUDA", "S-NV-RN132U2", "S-ISS-RTX50-DRIVER"),
        ))
    return out


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
                f"MIG is enabled on {gpu_label(gpu)} but no MIG instance exists: CUDA sees no usable device "
                "on it.",
                f"Create instances (sudo nvidia-smi mig -i {gpu.index} -cgi <profile> -C) or disable MIG "
                f"(sudo nvidia-smi -i {gpu.index} -mig 0, then reset the GPU).",
            ))
        else:
            count = "an unknown number of" if gpu.mig_devices is None else str(gpu.mig_devices)
            out.append(Finding(
                Severity.INFO, "MIG_ENABLED",
                f"MIG is enabled on {gpu_label(gpu)} with {count} instance(s): a process uses one MIG "
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
    rule_driver_predates_gpu,
    rule_arch,
    rule_arch_data_check,
    rule_rocm_arch,
    rule_hsa_override,
    rule_mps,
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
