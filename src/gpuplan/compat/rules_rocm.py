"""AMD (ROCm) and Apple (MPS) rules: does the installed wheel have code objects for each AMD GPU's gfx
target; is an HSA override set, and is it safe; can MPS run on this macOS, and with which dtypes.

Facts come from data/rocm.yaml (each with its source); like every rule, a fact the probe could not read
keeps a rule silent.
"""

from __future__ import annotations

from gpuplan.compat import rocm
from gpuplan.compat.dataload import rocm_data
from gpuplan.compat.environment import Environment, GpuInfo
from gpuplan.compat.findings import Finding, Severity
from gpuplan.compat.rulekit import install_hint
from gpuplan.compat.versions import parse_version

_OVERRIDE = "HSA_OVERRIDE_GFX_VERSION"


def _wheel_targets(env: Environment) -> tuple[tuple[str, ...] | None, str]:
    """The installed ROCm wheel's gfx targets and where they come from (None: not known)."""
    t = env.torch
    if t.imported and t.arch_list and any(a.startswith("gfx") for a in t.arch_list):
        return tuple(a.split(":")[0] for a in t.arch_list), "torch.cuda.get_arch_list()"
    pinned = rocm.wheel_arch_list(t.version)
    if pinned is not None:
        return pinned.gfx, f"the official {t.version} ROCm wheel's build list"
    return None, ""


def _no_kernels(gpu: GpuInfo, gfx: str, targets_from: str, env: Environment) -> Finding:
    override = rocm.safe_override(gfx)
    newer = rocm.first_release_with(gfx)
    if newer is not None:
        fix = (f"Install torch >= {newer} for ROCm (its wheels include {gfx}): {install_hint(env)}")
    elif override is not None:
        fix = (f"No official wheel has {gfx}. {gfx} shares its instruction set with {override.runs_as}, which "
               f"the wheel has: run with {override.variable} (set it before Python starts).")
    else:
        fix = (f"No official wheel has {gfx} and no override is safe for it: build PyTorch from source with "
               f"PYTORCH_ROCM_ARCH={gfx}, use a vendor build for this GPU, or run on the CPU.")
    return Finding(
        Severity.ERROR, "ROCM_ARCH_NOT_IN_WHEEL",
        f"GPU {gpu.index} ({gpu.name or 'AMD GPU'}) is {gfx}, which is not among {targets_from}'s targets: "
        "kernels fail with 'hipErrorNoBinaryForGpu' or 'HIP error: invalid device function'.",
        fix,
        (*rocm_data().arch_lists[-1].sources, *(override.sources if override and newer is None else ())),
    )


def rule_rocm_arch(env: Environment) -> list[Finding]:
    if env.torch.build != "rocm" or not env.rocm.gpus:
        return []
    targets, where = _wheel_targets(env)
    override_set = env.env_vars.get(_OVERRIDE)
    out: list[Finding] = []
    for gpu in env.rocm.gpus:
        gfx = gpu.gfx
        if gfx is None:
            continue
        if targets is not None:
            missing = gfx not in targets
            if missing and override_set is None:
                out.append(_no_kernels(gpu, gfx, where, env))
            continue
        if not rocm.in_any_official_wheel(gfx) and override_set is None:
            out.append(_no_kernels(gpu, gfx, "any official PyTorch ROCm wheel", env))
        elif not rocm.in_every_rocm6_wheel(gfx):
            out.append(Finding(
                Severity.INFO, "ROCM_ARCH_LIST_UNKNOWN",
                f"Whether torch {env.torch.version} has kernels for GPU {gpu.index} ({gfx}) is not in gpuplan's "
                "data (official ROCm wheels added this target in later releases).",
                "Run `gpuplan doctor --import-torch` to read the wheel's own target list.",
                rocm_data().arch_lists[-1].sources,
            ))
    return out


def _target_of(value: str) -> str | None:
    """"10.3.0" -> "gfx1030", "9.0.10" -> "gfx90a" (major, minor, stepping in hex); None if malformed."""
    parts = value.strip().split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        return None
    major, minor, stepping = (int(p) for p in parts)
    return f"gfx{major}{minor}{stepping:x}"


def rule_hsa_override(env: Environment) -> list[Finding]:
    value = env.env_vars.get(_OVERRIDE)
    if value is None or not env.rocm.gpus:
        return []
    out: list[Finding] = []
    for gpu in env.rocm.gpus:
        if gpu.gfx is None:
            continue
        safe = rocm.safe_override(gpu.gfx)
        if safe is not None and safe.variable == f"{_OVERRIDE}={value}":
            out.append(Finding(
                Severity.INFO, "HSA_OVERRIDE_SAFE",
                f"{_OVERRIDE}={value}: GPU {gpu.index} ({gpu.gfx}) runs {safe.runs_as} code objects, which share "
                "its instruction set.",
                "Nothing to do; remove the variable once a wheel with the GPU's own target is installed.",
                safe.sources,
            ))
        else:
            runs_as = _target_of(value)
            if runs_as is None:
                out.append(Finding(
                    Severity.WARNING, "HSA_OVERRIDE_UNSAFE",
                    f"{_OVERRIDE}={value!r} is not a version like 10.3.0: the ROCm runtime may ignore it or fail.",
                    f"Unset {_OVERRIDE}" + (f" or use {safe.variable}." if safe else "."),
                    rocm_data().override_sources,
                ))
                continue
            out.append(Finding(
                Severity.WARNING, "HSA_OVERRIDE_UNSAFE",
                f"{_OVERRIDE}={value} makes GPU {gpu.index} ({gpu.gfx}) load {runs_as} code objects: "
                + ("it is that target already." if runs_as == gpu.gfx else
                   "another instruction set, which can crash, hang or compute wrong results."),
                (f"Use {safe.variable} instead." if safe is not None else
                 f"Unset {_OVERRIDE} and install a wheel that has {gpu.gfx}: {install_hint(env)}"),
                rocm_data().override_sources,
            ))
    return out


def rule_mps(env: Environment) -> list[Finding]:
    plat = env.platform
    if plat.system != "Darwin" or not env.torch.installed:
        return []
    mps = rocm_data().mps
    macos = parse_version((plat.os_name or "").removeprefix("macOS").strip() or None)
    if macos is None:
        return []
    sources = tuple(mps["src"])
    if macos < (parse_version(str(mps["min_macos"])) or (0,)):
        return [Finding(
            Severity.ERROR, "MPS_MACOS_TOO_OLD",
            f"{plat.os_name}: the MPS (Apple GPU) backend needs macOS {mps['min_macos']} or newer; PyTorch runs "
            "on the CPU only.",
            "Update macOS to use the Apple GPU.", sources,
        )]
    if plat.machine == "x86_64" and env.mps != "available":
        return []
    if macos < (parse_version(str(mps["bf16_min_macos"])) or (0,)):
        return [Finding(
            Severity.WARNING, "MPS_NO_BF16",
            f"{plat.os_name}: MPS has no bfloat16 before macOS {mps['bf16_min_macos']} ('MPS BFloat16 is only "
            "supported on MacOS 14 or newer'); float64 and float8 never run on MPS.",
            "Use float16 (torch.autocast('mps', dtype=torch.float16)) or update macOS.", sources,
        )]
    return []
