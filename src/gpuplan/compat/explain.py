"""Recognise a pasted CUDA / PyTorch error: its family, cause and fix, with numbers where it has them."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuplan.compat.dataload import ErrorFamily, error_families, rocm_data
from gpuplan.compat.oom import OomNumbers, OomVerdict, judge_oom, mps_oom_details, parse_mps_oom, parse_oom
from gpuplan.compat.rocm import gfx_in, safe_override
from gpuplan.compat.versions import cuda_from_driver_int


@dataclass(frozen=True)
class Explanation:
    family: str  # family id from data/errors.yaml, e.g. "cuda-oom"
    title: str
    matched: str  # the line of the input that matched
    cause: str
    fix: tuple[str, ...]
    details: tuple[str, ...]  # facts read from the message itself
    oom: OomNumbers | None
    oom_verdict: OomVerdict | None
    sources: tuple[str, ...]
    threads: tuple[str, ...]


def _line_of(text: str, start: int) -> str:
    begin = text.rfind("\n", 0, start) + 1
    end = text.find("\n", start)
    return text[begin : end if end != -1 else len(text)].strip()[:300]


def _details(family: ErrorFamily, text: str) -> tuple[str, ...]:
    """Facts the message carries: driver CUDA version, GPU capability, arch list, CUDA versions."""
    out = []
    found = re.search(r"found version (\d+)", text)
    if found and family.id == "driver-too-old":
        cuda = cuda_from_driver_int(int(found.group(1)))
        out.append(f"The installed driver supports CUDA up to {cuda} (found version {found.group(1)}).")
    sm = re.search(r"with CUDA capability sm_(\d+)", text) or re.search(
        r"compute capability \(CC\) (\d+)\.(\d+)", text
    )
    if sm:
        code = sm.group(1) if sm.lastindex == 1 else sm.group(1) + sm.group(2)
        out.append(f"The GPU is sm_{code}.")
    supports = re.search(r"supports CUDA capabilities ((?:(?:sm|compute)_\d+[af]? ?)+)", text)
    if supports:
        archs = supports.group(1).split()
        out.append(f"The installed torch has kernels for: {' '.join(archs)}.")
        blackwell = any(a.startswith(("sm_100", "sm_120")) for a in archs)
        if archs and archs[-1].startswith("sm_90") and not blackwell:
            out.append("That list ends at sm_90: a CUDA 12.6-or-older build without Blackwell kernels.")
    mismatch = re.search(r"detected CUDA version \(([\d.]+)\) mismatches the version that was used to "
                         r"compile\s*PyTorch \(([\d.]+)\)", text)
    if mismatch:
        local, built = mismatch.group(1), mismatch.group(2)
        out.append(f"Local toolkit (nvcc) is CUDA {local}; torch was built with CUDA {built}.")
    nccl = re.search(r"NCCL version ([\d.]+)", text)
    if nccl:
        out.append(f"NCCL {nccl.group(1)}.")
    timeout = re.search(r"OpType=(\w+).*?Timeout\(ms\)=(\d+)\) ran for (\d+) milliseconds", text)
    if timeout:
        out.append(f"A {timeout.group(1)} waited {int(timeout.group(3)) / 1000:.0f} s against a "
                   f"{int(timeout.group(2)) / 1000:.0f} s timeout.")
    cublas = re.search(r"(CUBLAS_STATUS_[A-Z_]+)(?: when calling `(\w+))?", text)
    if cublas:
        out.append(f"{cublas.group(1)}" + (f" in {cublas.group(2)}." if cublas.group(2) else "."))
    assertion = re.search(r"Assertion `([^`]+)` failed", text)
    if assertion:
        out.append(f"Failed check: {assertion.group(1)}")
    if family.id == "mps-oom":
        mps = parse_mps_oom(text)
        if mps is not None:
            out += mps_oom_details(mps, float(rocm_data().mps["high_watermark_ratio"]))
    gfx = gfx_in(text) if family.id == "hip-no-code-object" else None
    if gfx:
        override = safe_override(gfx)
        out.append(f"The GPU is {gfx}." + (f" {override.variable} is safe for it (runs {override.runs_as} code)."
                                           if override else " No HSA_OVERRIDE_GFX_VERSION is safe for it."))
    return tuple(out)


def explain_error(text: str) -> Explanation | None:
    """The first family (in data order) whose pattern occurs in ``text``; None when none does."""
    for family in error_families():
        for pattern in family.patterns:
            match = pattern.search(text)
            if match is None:
                continue
            oom = parse_oom(text) if family.id == "cuda-oom" else None
            return Explanation(
                family=family.id,
                title=family.title,
                matched=_line_of(text, match.start()),
                cause=family.cause,
                fix=family.fix,
                details=_details(family, text),
                oom=oom,
                oom_verdict=judge_oom(oom) if oom else None,
                sources=family.sources,
                threads=family.threads,
            )
    return None


def family_ids() -> list[str]:
    return [f.id for f in error_families()]
