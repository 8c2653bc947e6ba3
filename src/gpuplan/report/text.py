"""Terminal rendering of results: plain text tables, GiB throughout (never mixed with GB)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpuplan.report.labels import label
from gpuplan.units import GIB, KIB, MIB, format_bytes, format_count, format_flops, format_seconds

if TYPE_CHECKING:
    from gpuplan.estimate import Estimate



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


_UNITS = (("GiB", GIB), ("MiB", MIB), ("KiB", KIB))


def table_unit(values: Sequence[int], *, fit_smallest: bool = True) -> tuple[str, int]:
    """One binary unit for a table. ``fit_smallest``: the largest unit in which every non-zero value
    shows at least 0.01 (so no row of a small model reads 0.00); else the largest unit the largest
    value reaches (a table spanning orders of magnitude, like the components beside a CUDA context)."""
    nonzero = [abs(v) for v in values if v]
    if not nonzero:
        return "GiB", GIB
    for name, scale in _UNITS:
        if (min(nonzero) >= scale // 100) if fit_smallest else (max(nonzero) >= scale):
            return name, scale
    return "B", 1


def _in(n: int, scale: int) -> str:
    if scale == 1:
        return f"{n:,}"
    return "<0.01" if 0 < abs(n) < scale // 200 else f"{n / scale:.2f}"


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
    kernels = "/".join(sorted(est.step.attention_backends))  # the SDPA kernel(s) the target GPU runs
    # a checkpoint without config.json is its stored tensors (bf16, GGUF blocks...): no precision is applied
    weights_only = not est.step.ops and est.step.peak_phase == "setup"
    lines = [
        f"{est.model} — {w.mode}, {shape}, {'weights as stored' if weights_only else w.precision}"
        + (f", {kernels} attention" if kernels else "")
        + (f", {w.optimizer}" if w.mode == "train" else "")
        + (f", checkpointing {w.checkpointing}" if w.checkpointing != "none" else ""),
        f"parameters: {format_count(est.params_count)}   FLOPs/step: {format_flops(est.flops_per_step)}   "
        f"peak during: {est.peak_phase}",
        "",
    ]
    total = est.total_required_bytes or 1
    shown = [(k, v) for k, v in est.components.items() if v > 0 or k in ("parameters", "activations")]
    unit, scale = table_unit([v for _, v in shown], fit_smallest=False)
    rows = [[label(k), _in(v, scale), f"{100 * v / total:.1f}%"] for k, v in shown]
    lines.append(table(rows, ["component", unit, "share"]))
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
        lines.append(verdict_line(est))
        if est.timing is not None:
            tp = est.timing.throughput
            iv = est.timing.interval
            span = f" ({iv.describe()})" if iv is not None else ""
            lines.append(f"step time {format_seconds(est.timing.step_time_s)}{span}   throughput {tp['value']:,.1f} "
                         f"{tp['unit']}   MFU {100 * est.timing.mfu:.1f}%")
            lines.append(_breakdown_line(est.timing.time.breakdown_s, est.timing.step_time_s))
        elif est.time_unknown is not None:
            lines.append(f"step time unknown ({est.time_unknown}); the memory above stands")
    if est.pipeline is not None:
        lines += ["", *pipeline_lines(est)]
    if est.step.top_activation_modules:
        where = f"the peak ({est.step.peak_phase}), as in the activations component"
        lines += ["", f"activation memory at {where}, by module (top 10):"]
        unit, scale = table_unit([b for _, b in est.step.top_activation_modules])
        lines.append(table([[m, _in(b, scale)] for m, b in est.step.top_activation_modules], ["module", unit]))
    if est.assumptions:
        lines += ["", "assumptions:"] + [f"  - {a}" for a in est.assumptions]
    return "\n".join(lines)


def generation_size(est: Estimate) -> str:
    """``28 steps at 1024×1024`` (``, 81 frames`` for a video): a pipeline's generation as modelled."""
    shape = est.pipeline_shape or {}
    frames = f", {shape['frames']} frames" if shape.get("frames") else ""
    return f"{shape.get('steps')} steps at {shape.get('height')}×{shape.get('width')}{frames}"


def pipeline_lines(est: Estimate) -> list[str]:
    """A diffusion pipeline's components (parameters, weights, where they live under the offload mode, the GPU
    peak while each runs), the peak of each phase, and host RAM."""
    p = est.pipeline
    if p is None:
        return []
    params = est.component_params or {}
    sizes = [c.weight_bytes for c in p.components] + [v for v in est.step.phase_peaks.values()]
    unit, scale = table_unit(sizes, fit_smallest=False)
    rows = [[c.name, format_count(params.get(c.name, 0)), _in(c.weight_bytes, scale), _in(c.gpu_bytes, scale),
             c.where, _in(c.phase_peak_bytes, scale) if c.phase_peak_bytes is not None else "-"]
            for c in p.components]
    lines = [f"pipeline ({generation_size(est)}, --offload {p.offload}):",
             table(rows, ["component", "parameters", f"weights {unit}", f"on GPU {unit}", "where",
                          f"peak while running {unit}"], "lrrrlr")]
    phases = [[phase, _in(b, scale)] for phase, b in est.step.phase_peaks.items()]
    if phases:
        lines += ["", "live tensors by phase (all components resident, as traced):",
                  table(phases, ["phase", unit])]
    lines.append(f"GPU peak in {p.peak_phase or est.peak_phase}; host RAM for weights "
                 f"{format_bytes(p.host_memory_bytes)}"
                 + (f"; {format_bytes(p.transfer_bytes)} copied host → GPU per generation" if p.transfer_bytes else ""))
    return lines


_BREAKDOWN_WORDS = {"gemm": "GEMM", "conv": "conv", "attention": "attention", "memory_bound": "memory-bound",
                    "launch": "launch/dispatch", "communication_exposed": "exposed communication"}


def _breakdown_line(breakdown_s: dict[str, float], total_s: float) -> str:
    """Where the step time goes: the cost classes over 0.5% of it, largest first."""
    total = total_s or 1.0
    parts = sorted(((v, k) for k, v in breakdown_s.items() if v > 0.005 * total), reverse=True)
    return "time by class   " + " · ".join(f"{_BREAKDOWN_WORDS.get(k, k)} {100 * v / total:.0f}%" for v, k in parts)


def verdict_line(est: Estimate) -> str:
    """The fit verdict with its own reconciliation: what the step needs (the least it runs in, which
    decides), of how much is usable, and what the allocator would cache beyond it given room."""
    if est.gpu is None:
        return ""
    usable = est.gpu.usable_memory_bytes
    needs = est.min_required_bytes or est.total_required_bytes
    headroom = est.headroom_bytes if est.headroom_bytes is not None else usable - needs
    line = (f"{est.gpu.id}: {'fits' if est.fits else 'does NOT fit'}: needs {format_bytes(needs)} of "
            f"{format_bytes(usable)} usable")
    if needs < est.total_required_bytes:
        room = "on a larger GPU" if est.total_required_bytes > usable else "with room to spare"
        line += f" (the allocator would cache up to {format_bytes(est.total_required_bytes)} {room})"
    return line + (f"; headroom {format_bytes(headroom)}" if headroom >= 0 else f"; short by {format_bytes(-headroom)}")
