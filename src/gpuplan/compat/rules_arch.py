"""Arch rules: does the installed wheel have kernels for each GPU, and for how many more releases.

PyTorch's own rule decides (archs.support, source S-TORCH213); the release data says which other build
or release would have the kernels.
"""

from __future__ import annotations

from gpuplan.compat import dataload
from gpuplan.compat.archs import ArchSupport, architecture, support
from gpuplan.compat.environment import Environment, GpuInfo
from gpuplan.compat.findings import Finding, Severity
from gpuplan.compat.rulekit import distinct_gpus, gpu_label, has_code, install_hint, is_windows, sm_label
from gpuplan.compat.versions import parse_version


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


def rule_arch_data_check(env: Environment) -> list[Finding]:
    """With --import-torch: does gpuplan's release data agree with the wheel's own arch list?"""
    t = env.torch
    if not t.imported or not t.arch_list or t.arch_list_in_data is None:
        return []
    if set(t.arch_list) == set(t.arch_list_in_data):
        return []
    return [Finding(
        Severity.INFO, "ARCH_DATA_DIFFERS",
        f"torch.cuda.get_arch_list() of torch {t.version} is {' '.join(t.arch_list)}, but gpuplan's release "
        f"data says {' '.join(t.arch_list_in_data)}; this report uses torch's own list.",
        "Nothing to do here; please report it so gpuplan's data can be corrected (attach `gpuplan doctor "
        "--import-torch --record env.yaml`).",
    )]


def rule_arch(env: Environment) -> list[Finding]:
    t = env.torch
    if t.build != "cuda" or not env.nvidia.gpus:
        return []
    out = []
    windows = is_windows(env)
    rel = dataload.release(t.version)
    listed = " ".join(t.arch_list) if t.arch_list else "unknown"
    for gpu, indices in distinct_gpus(env.nvidia.gpus):
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
        if verdict is ArchSupport.UNKNOWN and not has_code(out, "ARCH_LIST_UNKNOWN"):
            out.append(Finding(
                Severity.INFO, "ARCH_LIST_UNKNOWN",
                f"The kernel (arch) list of torch {t.version} is not known without importing torch (it is "
                "not an "
                "official release wheel in gpuplan's data), so whether it has kernels for "
                f"{gpu_label(gpu, indices)} was not checked.",
                "Run `gpuplan doctor --import-torch` to read torch.cuda.get_arch_list().",
            ))
            continue
        src = f" [{t.arch_list_source}]" if t.arch_list_source else ""
        if verdict is ArchSupport.NONE:
            out.append(_arch_missing(env, gpu, indices, rel, listed + src, windows))
        elif verdict is ArchSupport.PTX_ONLY:
            out.append(Finding(
                Severity.WARNING, "ARCH_PTX_ONLY",
                f"{gpu_label(gpu, indices)} has no compiled kernels in torch {t.version} (arch list: "
                f"{listed}{src}); it "
                "runs on PTX JIT-compiled by the driver: slow first use, and it needs a driver that fully "
                "supports the wheel's CUDA version.",
                f"Prefer a build with native kernels for {sm_label(gpu.cc)}: {install_hint(env)}",
                ("S-CNBLOGS-BINCOMPAT",),
            ))
        elif verdict is ArchSupport.NATIVE:
            out += _arch_support_ends(gpu, indices, rel, windows, env.platform.machine)
    return out


def _arch_missing(env: Environment, gpu: GpuInfo, indices: list[int], rel: dataload.Release | None,
                  listed: str, windows: bool) -> Finding:
    t = env.torch
    head = (f"{gpu_label(gpu, indices)} has no kernels in torch {t.version} (arch list: {listed}); "
            "CUDA ops fail with 'no kernel image is available for execution on the device'.")
    machine = env.platform.machine
    other = _covering(gpu.cc or "", rel, windows, machine) if rel else []
    if rel is not None and other:
        return Finding(
            Severity.ERROR, "ARCH_NOT_IN_WHEEL",
            f"{head} Another CUDA build of the same release has them: {', '.join(other)}.",
            f"Reinstall from an index with {sm_label(gpu.cc)} kernels: {install_hint(env, t.version)}",
            ("S-TORCH213",),
        )
    last = _last_release_for(gpu.cc or "", windows, machine)
    newest = dataload.releases()[0]
    if last is None:
        why = f"No release in gpuplan's data (up to {newest.version}) has kernels for {sm_label(gpu.cc)}."
    elif (parse_version(last[0].version) or (0,)) < (parse_version(t.version) or (0,)):
        why = (f"This release dropped {architecture(gpu.cc) or sm_label(gpu.cc)}: the last release with "
               f"kernels for it is torch {last[0].version} ({last[1]}).")
    else:
        oldest_first = reversed(dataload.releases())
        cc = gpu.cc or ""
        first = next((r, tags[0]) for r in oldest_first if (tags := _covering(cc, r, windows, machine)))
        why = (f"The GPU is newer than this release: the first release with {sm_label(gpu.cc)} kernels is "
               f"torch {first[0].version} ({first[1]}).")
    return Finding(
        Severity.ERROR, "ARCH_NOT_IN_RELEASE", f"{head} {why}",
        f"Install a release that has them: {install_hint(env)}", ("S-TORCH213", "S-DEVDISCUSS-CU126"),
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
        f"{gpu_label(gpu, indices)} is supported up to torch {last[0].version} ({last[1]}); torch {nxt} "
        "and later ship no kernels for it, so an unpinned upgrade breaks CUDA on this GPU.",
        f"Pin 'torch<{nxt}' (and install from the {last[1]} index).",
        ("S-DEVDISCUSS-CU126", "S-ISS-172352"),
    )]


