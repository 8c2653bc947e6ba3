"""Text, markdown and JSON for doctor / install / explain results. The library never prints; the CLI
prints what these return."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from gpuplan.compat.archs import architecture
from gpuplan.compat.environment import Environment, GpuInfo
from gpuplan.compat.explain import Explanation
from gpuplan.compat.findings import Finding, Severity
from gpuplan.compat.install import InstallPlan
from gpuplan.units import format_bytes

UNKNOWN = "unknown"


def _plain(value: Any) -> Any:
    """dataclasses/enums/tuples -> JSON-ready values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _or(value: object, default: str = UNKNOWN) -> str:
    return default if value is None or value == "" else str(value)


def doctor_json(env: Environment, findings: list[Finding]) -> dict[str, Any]:
    return {
        "findings": [_plain(f) for f in findings],
        "environment": _plain(env),
        "error_count": sum(f.severity is Severity.ERROR for f in findings),
        "warning_count": sum(f.severity is Severity.WARNING for f in findings),
    }


def _torch_row(env: Environment) -> str:
    t = env.torch
    if not t.installed:
        return "not installed"
    build = {"cuda": f"CUDA {_or(t.cuda)} build", "rocm": f"ROCm {_or(t.hip)} build", "cpu": "CPU-only build",
             "xpu": "XPU build"}.get(t.build or "", "build unknown")
    how = "imported" if t.imported else "read without importing torch"
    return f"{t.version} ({build}; {how})"


def _gpu_rows(gpus: tuple[GpuInfo, ...]) -> list[str]:
    rows = ["| # | name | compute capability | memory used / total | MIG | ECC | processes |",
            "|---|---|---|---|---|---|---|"]
    for g in gpus:
        arch = architecture(g.cc) or "unknown arch"
        cc = UNKNOWN if g.cc is None else f"{g.cc} ({arch}; from {g.cc_source})"
        if g.vendor == "amd":  # AMD GPUs have a gfx target, not a compute capability
            cc = UNKNOWN if g.gfx is None else f"{g.gfx} (from {g.gfx_source})"
        memory = (f"{format_bytes(g.memory_used_bytes) if g.memory_used_bytes is not None else UNKNOWN} / "
                  f"{format_bytes(g.memory_total_bytes) if g.memory_total_bytes is not None else UNKNOWN}")
        mig = UNKNOWN if g.mig_mode is None else ("on" if g.mig_mode else "off")
        if g.mig_mode and g.mig_devices is not None:
            mig += f", {g.mig_devices} instance(s)"
        ecc = UNKNOWN if g.ecc is None else ("on" if g.ecc else "off")
        rows.append(f"| {g.index} | {_or(g.name)} | {cc} | {memory} | {mig} | {ecc} | {_or(g.processes)} |")
    return rows


def doctor_markdown(env: Environment, findings: list[Finding]) -> str:
    p, t, nv, tk = env.platform, env.torch, env.nvidia, env.toolkit
    driver = nv.driver_version or ("not found" if nv.source == "none" else UNKNOWN)
    if nv.problem:
        driver += f" ({nv.problem})"
    driver_cuda = _or(nv.driver_cuda) + (f" (from {nv.driver_cuda_source})" if nv.driver_cuda_source else "")
    rows = [
        ("Python", f"{_or(p.python)} on {_or(p.system)} {_or(p.machine)} ({_or(p.os_name)})"
                   + (", WSL" if p.wsl else "")),
        ("PyTorch", _torch_row(env)),
    ]
    if t.installed:
        rows += [
            ("torch CUDA arch list", " ".join(t.arch_list) + f" ({t.arch_list_source})" if t.arch_list
             else ("not applicable" if t.build != "cuda" else UNKNOWN)),
            ("cuDNN", f"{t.cudnn} ({t.cudnn_source})" if t.cudnn else UNKNOWN),
            ("NCCL", _or(t.nccl)),
            ("torchvision", _or(t.torchvision, "not installed")),
            ("torchaudio", _or(t.torchaudio, "not installed")),
        ]
        if t.imported:
            rows.append(("torch.cuda.is_available()", _or(t.cuda_available)))
    rows += [
        ("NVIDIA driver", driver if nv.source == "none" else f"{driver} [via {nv.source}]"),
        ("Driver supports CUDA up to", driver_cuda),
        ("NVIDIA GPUs", str(len(nv.gpus)) if nv.gpus else "none found"),
        ("CUDA toolkit (nvcc)", f"{tk.nvcc_version} ({tk.nvcc_path})" if tk.nvcc_version else "not found"),
        ("CUDA_HOME", _or(tk.cuda_home, "unset")),
        ("cuDNN header", f"{tk.cudnn_header_version} ({tk.cudnn_header_path})" if tk.cudnn_header_path
         else "not found"),
        ("ROCm", f"{_or(env.rocm.version)}, {len(env.rocm.gpus)} GPU(s)" if env.rocm.present
         else "not found"),
        ("Apple MPS", _or(env.mps)),
    ]
    for name, value in sorted(env.env_vars.items()):
        rows.append((name, f"`{value}`"))
    lines = ["## gpuplan doctor", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in rows]
    if nv.gpus or env.rocm.gpus:
        lines += ["", "### GPUs", "", *_gpu_rows(nv.gpus + env.rocm.gpus)]
    lines += ["", "### Findings", ""]
    if not findings:
        lines.append("No problems found.")
    for i, f in enumerate(findings, 1):
        lines.append(f"{i}. **{f.severity.value}** `{f.code}`: {f.message}")
        lines.append(f"   - Fix: {f.fix}")
    errors = sum(f.severity is Severity.ERROR for f in findings)
    warnings = sum(f.severity is Severity.WARNING for f in findings)
    lines += ["", f"{errors} error(s), {warnings} warning(s). Source: {env.source}."]
    return "\n".join(lines) + "\n"


def install_json(plan: InstallPlan) -> dict[str, Any]:
    return _plain(plan)  # type: ignore[no-any-return]


def install_text(plan: InstallPlan) -> str:
    lines = []
    if plan.ok and plan.command:
        lines += [plan.command, ""]
        if plan.conda_command:
            lines += [f"conda (this release still had a conda build): {plan.conda_command}", ""]
    else:
        lines += ["No compatible PyTorch build found.", ""]
    lines.append(f"Why: {plan.reason}")
    if plan.excluded:
        lines.append("Left out:")
        lines += [f"  - {e.what}: {e.reason}" for e in plan.excluded]
    lines += [f"Note: {n}" for n in plan.notes]
    return "\n".join(lines) + "\n"


def explain_json(expl: Explanation | None) -> dict[str, Any]:
    if expl is None:
        return {"recognized": False, "family": None}
    return {"recognized": True, **_plain(expl)}


def explain_text(expl: Explanation | None) -> str:
    if expl is None:
        return ("Not recognised as a known CUDA / PyTorch error. `gpuplan doctor` checks the setup; paste "
                "the full traceback, including the last 'Error:' line.\n")
    lines = [f"{expl.title}  [{expl.family}]", f"Matched: {expl.matched}", "", f"Cause: {expl.cause}"]
    if expl.details:
        lines += ["", "From the message:"] + [f"  - {d}" for d in expl.details]
    if expl.oom is not None and expl.oom_verdict is not None:
        n, v = expl.oom, expl.oom_verdict
        def size(x: int | None) -> str:
            return UNKNOWN if x is None else format_bytes(x)
        lines += ["", "Numbers:",
                  f"  tried to allocate        {size(n.tried_bytes)}",
                  f"  GPU total capacity       {size(n.total_bytes)}",
                  f"  free on the GPU          {size(n.free_bytes)}",
                  f"  allocated by PyTorch     {size(n.allocated_bytes)}",
                  f"  reserved, unallocated    {size(n.reserved_unallocated_bytes)}"]
        if n.process_in_use_bytes is not None:
            lines.append(f"  this process in use      {size(n.process_in_use_bytes)}")
        if n.other_processes_bytes is not None:
            lines.append(f"  other processes          {size(n.other_processes_bytes)}")
        lines += ["", f"Verdict ({v.kind}): {v.summary}"] + [f"  - {a}" for a in v.actions]
    else:
        lines += ["", "Fix:"] + [f"  - {f}" for f in expl.fix]
    if expl.threads:
        lines += ["", "Seen in: " + ", ".join(expl.threads[:4])]
    return "\n".join(lines) + "\n"
