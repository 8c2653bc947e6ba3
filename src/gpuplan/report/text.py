"""Terminal rendering of results: plain text tables, GiB throughout (never mixed with GB)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpuplan.units import GIB, format_bytes, format_count, format_flops, format_seconds

if TYPE_CHECKING:
    from gpuplan.estimate import Estimate

_COMPONENT_LABELS = {
    "parameters": "parameters",
    "gradients": "gradients",
    "optimizer_state": "optimizer state",
    "activations": "activations",
    "temporaries": "temporaries",
    "kv_cache": "KV cache",
    "workspaces": "cuBLAS workspaces",
    "allocator_overhead": "allocator slack",
    "cuda_context": "CUDA context",
}


def table(rows: Sequence[Sequence[str]], header: Sequence[str], align: str = "") -> str:
    """A plain aligned table; ``align`` holds 'l' or 'r' per column (default: first left, rest right)."""
    cols = len(header)
    align = align or "l" + "r" * (cols - 1)
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(cols)]

    def fmt(row: Sequence[str]) -> str:
        cells = [str(c).ljust(w) if a == "l" else str(c).rjust(w) for c, w, a in zip(row, widths, align, strict=True)]
        return "  ".join(cells).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([fmt(header), rule, *(fmt(r) for r in rows)])


def _gib(n: int) -> str:
    return f"{n / GIB:.2f}"


def render_estimate(est: Estimate) -> str:
    w = est.workload
    shape = f"batch {w.batch_size}"
    if w.seq_len:
        shape += f", seq {w.seq_len}"
    if w.image_size:
        shape += f", image {w.image_size}px"
    if w.mode == "generate":
        shape += f", +{w.new_tokens} tokens"
    if w.grad_accum > 1:
        shape += f", grad-accum {w.grad_accum}"
    lines = [
        f"{est.model} — {w.mode}, {shape}, {w.precision}"
        + (f", {w.optimizer}" if w.mode == "train" else "")
        + (f", checkpointing {w.checkpointing}" if w.checkpointing != "none" else ""),
        f"parameters: {format_count(est.params_count)}   FLOPs/step: {format_flops(est.flops_per_step)}   "
        f"peak during: {est.peak_phase}",
        "",
    ]
    total = est.total_required_bytes or 1
    rows = [[_COMPONENT_LABELS[k], _gib(v), f"{100 * v / total:.1f}%"]
            for k, v in est.components.items() if v > 0 or k in ("parameters", "activations")]
    lines.append(table(rows, ["component", "GiB", "share"]))
    lines += [
        "",
        f"peak allocated  {format_bytes(est.peak_allocated_bytes)}   (torch.cuda.max_memory_allocated)",
        f"peak reserved   {format_bytes(est.peak_reserved_bytes)}   (torch.cuda.max_memory_reserved)",
        f"total required  {format_bytes(est.total_required_bytes)}   (what nvidia-smi would show)",
    ]
    if est.min_required_bytes and est.min_required_bytes < est.total_required_bytes:
        lines.append(f"least needed    {format_bytes(est.min_required_bytes)}   "
                     "(cached blocks released under pressure)")
    if est.gpu is not None:
        verdict = "fits" if est.fits else "does NOT fit"
        lines.append(f"{est.gpu.id}: {format_bytes(est.gpu.usable_memory_bytes)} usable — {verdict} "
                     f"(headroom {format_bytes(est.headroom_bytes or 0)})")
        if est.step_time_s is not None:
            tp = est.throughput or {}
            lines.append(f"step time {format_seconds(est.step_time_s)}   throughput {tp.get('value', 0):,.1f} "
                         f"{tp.get('unit', '')}" + (f"   MFU {100 * est.mfu:.1f}%" if est.mfu is not None else ""))
    if est.step.top_activation_modules:
        where = "end of forward" if est.workload.trains else "the peak"
        lines += ["", f"activation memory at {where}, by module (top 10):"]
        lines.append(table([[m, _gib(b)] for m, b in est.step.top_activation_modules], ["module", "GiB"]))
    if est.assumptions:
        lines += ["", "assumptions:"] + [f"  - {a}" for a in est.assumptions]
    return "\n".join(lines)
