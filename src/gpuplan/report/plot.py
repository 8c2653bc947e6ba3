"""Pictures of results (``--plot FILE.png|FILE.svg`` and the HTML report), drawn with matplotlib.

Every figure is drawn from the result's JSON dict (the contract), so a number in the picture is
the number in ``--json``; estimate's timeline adds the traced run's live bytes per op
(:class:`MemoryTimeline`, built by the CLI from the trace record). matplotlib is the optional
extra ``plot``: imported here only when a picture is asked for, and its absence is a one-line error.
Figures are ``matplotlib.figure.Figure`` objects (no pyplot: no global state, no GUI backend).
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuplan.errors import ConfigError
from gpuplan.extras import PLOT
from gpuplan.report.labels import label
from gpuplan.units import format_bytes

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from gpuplan.estimate import Estimate

PLOT_SUFFIXES: tuple[str, ...] = (".png", ".svg")
INSTALL_HINT = PLOT.install

# traced categories, bottom of the stack first (the JSON contract's names)
TRACE_CATEGORIES: tuple[str, ...] = ("parameters", "gradients", "optimizer_state", "activations", "temporaries",
                                     "kv_cache")
COLORS: dict[str, str] = {
    "parameters": "#4c72b0", "gradients": "#dd8452", "optimizer_state": "#55a868", "activations": "#c44e52",
    "temporaries": "#8172b3", "kv_cache": "#937860", "cuda_context": "#8c8c8c", "workspaces": "#b0b0b0",
    "allocator_overhead": "#da8bc3", "communication_buffers": "#64b5cd", "allocator_slack": "#da8bc3",
    "cuda_context_and_workspaces": "#8c8c8c", "working": "#c44e52",
}
PHASE_COLORS: dict[str, str] = {"forward": "#e8f1fb", "loss": "#fdf3e1", "backward": "#fbe9e9",
                                "optimizer": "#eaf6ea", "zero_grad": "#f3f3f3", "prefill": "#e8f1fb",
                                "decode": "#f6eefa", "setup": "#ffffff"}
FIT_COLOR, MISS_COLOR, LIMIT_COLOR = "#55a868", "#c44e52", "#222222"


@dataclass(frozen=True, slots=True)
class MemoryTimeline:
    """Live tensor bytes by category after each op of the traced run, and the op's phase."""

    phases: tuple[str, ...]
    live_bytes: dict[str, tuple[int, ...]]
    traced_blocks: dict[str, int] = field(default_factory=dict)
    """Blocks per repeated stack in the traced run when the step was scaled to full depth (else empty)."""

    def totals(self) -> list[int]:
        return [sum(col) for col in zip(*self.live_bytes.values(), strict=True)] if self.live_bytes else []


def check_plot_path(path: str | Path) -> Path:
    """The picture's file: a .png or .svg in a folder that exists (checked before any tracing)."""
    p = Path(path)
    if "\x00" in str(path):  # no file system takes it (and Path.is_dir would raise)
        raise ConfigError(f"--plot {str(path)!r}: a path cannot hold a NUL character; pick another path")
    if p.suffix.lower() not in PLOT_SUFFIXES:
        raise ConfigError(f"--plot {str(path)!r}: the file must end in .png or .svg (the picture's format); "
                          "e.g. --plot memory.png")
    if not p.parent.is_dir():
        raise ConfigError(f"--plot {str(path)!r}: folder {str(p.parent)!r} does not exist; create it or pick "
                          "another path")
    return p


def _figure(width_in: float, height_in: float) -> Figure:
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:  # the optional extra is missing
        raise ConfigError(f"pictures need matplotlib, which is not installed ({exc.name}); "
                          f"run: {INSTALL_HINT}") from None
    return Figure(figsize=(width_in, height_in), layout="constrained")


def _scale(max_bytes: float) -> tuple[float, str]:
    """Divisor and binary unit that keep the axis numbers readable."""
    for div, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if max_bytes >= div:
            return float(div), unit
    return 1.0, "bytes"


def plain(text: object) -> str:
    """A user-derived string drawn as itself: a ``$`` would start matplotlib's math mode."""
    return str(text).replace("$", r"\$")


def _peak_text(label: str, num_bytes: int) -> str:
    # the exact byte count is in the text so a reader (and a test) can match it to the JSON
    return f"{label} {format_bytes(num_bytes)} ({num_bytes:,} bytes)"


def _limit_line(ax: Axes, limit_bytes: int | None, top_bytes: float, div: float, label: str) -> None:
    """The GPU's usable memory as a line; far above the data it would flatten the plot, so it is
    then written in the corner instead."""
    if not limit_bytes:
        return
    if limit_bytes <= 4 * top_bytes:
        ax.axhline(limit_bytes / div, color=LIMIT_COLOR, linestyle="--", linewidth=1.2, label=label)
    else:
        ax.text(0.99, 0.98, f"{label}\n(off scale)", transform=ax.transAxes, ha="right", va="top", fontsize=7)


# --- estimate ---------------------------------------------------------------------------------

def estimate_figure(data: Mapping[str, Any], timeline: MemoryTimeline | None = None) -> Figure:
    """Memory over the traced step (stacked by category, phases shaded, peak marked, the GPU's
    usable memory as a line) and the component bar of the whole requirement beside it."""
    fig = _figure(11.0, 4.8)
    grid = fig.add_gridspec(1, 4)
    ax = fig.add_subplot(grid[0, :3])
    bar = fig.add_subplot(grid[0, 3])
    peak = int(data["tensor_peak_bytes"])
    usable = data.get("gpu_usable_memory_bytes")
    gpu_label = f"{data['gpu']} usable {format_bytes(usable)}" if usable else ""
    title = f"{plain(data['model'])} — {data['workload']['mode']}, batch {data['workload']['batch_size']}"
    fig.suptitle(title)
    if timeline is not None and timeline.phases:
        _timeline_axes(ax, timeline, peak, usable, gpu_label)
    else:
        ax.text(0.5, 0.5, "no op timeline (weights only)", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
    _component_bar(bar, data, usable, gpu_label)
    return fig


def _timeline_axes(ax: Axes, tl: MemoryTimeline, peak_bytes: int, usable: int | None, gpu_label: str) -> None:
    totals = tl.totals()
    top = max(max(totals, default=0), peak_bytes)
    div, unit = _scale(top)
    xs = list(range(len(tl.phases)))
    cats = [c for c in TRACE_CATEGORIES if any(tl.live_bytes.get(c, ()))]
    ax.stackplot(xs, *[[v / div for v in tl.live_bytes[c]] for c in cats], labels=[label(c) for c in cats],
                 colors=[COLORS[c] for c in cats], linewidth=0)
    start = 0
    for i in range(1, len(tl.phases) + 1):  # shade each run of one phase
        if i == len(tl.phases) or tl.phases[i] != tl.phases[start]:
            ax.axvspan(start - 0.5, i - 0.5, color=PHASE_COLORS.get(tl.phases[start], "#ffffff"), zorder=0)
            ax.text((start + i - 1) / 2, 1.01, tl.phases[start], transform=ax.get_xaxis_transform(),
                    ha="center", va="bottom", fontsize=7)
            start = i
    traced_peak = max(totals, default=0)
    at = totals.index(traced_peak) if totals else 0
    if traced_peak == peak_bytes:
        ax.plot([at], [peak_bytes / div], marker="v", color=LIMIT_COLOR, linestyle="none",
                label=_peak_text("peak", peak_bytes))
        ax.annotate(_peak_text("peak", peak_bytes), (at, peak_bytes / div), xytext=(8, -12),
                    textcoords="offset points", fontsize=8)
    else:
        # scaled to full depth (or decode extrapolated): the timeline is the traced run's shape,
        # the peak line is the full model's
        ax.axhline(peak_bytes / div, color=MISS_COLOR, linestyle=":", linewidth=1.2,
                   label=_peak_text("full-model peak", peak_bytes))
        blocks = ", ".join(f"{k}={n}" for k, n in tl.traced_blocks.items())
        ax.text(0.01, 0.98, f"timeline of the traced run{f' ({blocks} blocks)' if blocks else ''}",
                transform=ax.transAxes, ha="left", va="top", fontsize=8)
    _limit_line(ax, usable, top, div, gpu_label)
    ax.set_xlim(-0.5, len(xs) - 0.5)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("op of the traced step")
    ax.set_ylabel(f"live tensor memory ({unit})")
    ax.legend(loc="upper left", bbox_to_anchor=(0.0, -0.14), ncol=4, fontsize=7, frameon=False)


def _component_bar(ax: Axes, data: Mapping[str, Any], usable: int | None, gpu_label: str) -> None:
    comps = {k: int(v) for k, v in data["components"].items() if v}
    total = sum(comps.values())
    div, unit = _scale(max(total, 1))
    bottom = 0.0
    for name, value in comps.items():
        ax.bar([0], [value / div], bottom=bottom, color=COLORS.get(name, "#999999"), label=label(name), width=0.6)
        bottom += value / div
    ax.set_title(_peak_text("total", total).replace(" (", "\n("), fontsize=8)
    _limit_line(ax, usable, total, div, gpu_label)
    ax.set_xticks([0], ["components"])
    ax.set_xlim(-0.6, 0.6)
    ax.set_ylabel(unit)
    handles, labels = ax.get_legend_handles_labels()  # top of the stack first, as drawn
    ax.legend(handles[::-1], labels[::-1], loc="upper left", bbox_to_anchor=(0.0, -0.14), fontsize=7, frameon=False)


# --- fit --------------------------------------------------------------------------------------

def fit_figure(data: Mapping[str, Any], probes: Sequence[Mapping[str, Any]] = ()) -> Figure:
    """Memory and step time against batch size (the traced points, the affine model, the largest
    batch that fits) and, with a target batch, the technique ladder. ``fit --axis resolution`` draws its image
    sides in the batch's place (``data["axis_label"]``; each probe's ``batch_size`` holds its side)."""
    xlabel = str(data.get("axis_label") or "batch size")
    what = "image" if data.get("axis") == "resolution" else "batch"
    ladder = list(data.get("techniques") or [])
    # the batch search's points: the workload as given (the ladder's rungs change other fields)
    same = ("grad_accum", "precision", "optimizer", "checkpointing")
    points = {int(p["batch_size"]): p for p in [*probes, data.get("max_batch"), data.get("max_batch_plus_one")]
              if p and all(p[k] == data["workload"][k] for k in same)}
    usable = int(data["gpu_usable_memory_bytes"])
    batches = sorted(points)
    panels = len(batches) > 1 or not ladder  # one traced batch is a dot, not a curve: the ladder says it all
    fig = _figure((13.0 if ladder else 9.0) if panels else 6.5, 4.6)
    fig.suptitle(f"{plain(data['model'])} on {data['gpu']}: {fit_headline(data)}")
    if not panels:
        _ladder_axes(fig.subplots(1, 1), ladder, usable)
        return fig
    axes = fig.subplots(1, 3 if ladder else 2)
    top = max([usable, *(int(points[b]["min_required_bytes"]) for b in batches)])
    div, unit = _scale(top)
    mem, tim = axes[0], axes[1]
    for fits, color, legend in ((True, FIT_COLOR, "traced, fits"), (False, MISS_COLOR, "traced, does not fit")):
        bs = [b for b in batches if bool(points[b]["fits"]) is fits]
        mem.scatter(bs, [int(points[b]["min_required_bytes"]) / div for b in bs], color=color, label=legend, zorder=3)
    if len(batches) > 1:
        mem.plot(batches, [int(points[b]["min_required_bytes"]) / div for b in batches], color="#777777",
                 linewidth=1, zorder=2)
    mem.axhline(usable / div, color=LIMIT_COLOR, linestyle="--", linewidth=1.2,
                label=f"{data['gpu']} usable {format_bytes(usable)}")
    if data["max_batch_size"]:
        mem.axvline(data["max_batch_size"], color=FIT_COLOR, linestyle=":",
                    label=f"largest {what} that fits: {data['max_batch_size']}")
    mem.set_xlabel(xlabel)
    mem.set_ylabel(f"memory needed ({unit})")
    mem.set_ylim(bottom=0)
    mem.legend(fontsize=7)
    timed = [b for b in batches if points[b].get("step_time_s")]
    if timed:
        tim.plot(timed, [float(points[b]["step_time_s"]) * 1e3 for b in timed], marker="o", color="#4c72b0",
                 label="step time")
        if data["max_batch_size"]:
            tim.axvline(data["max_batch_size"], color=FIT_COLOR, linestyle=":", label=f"largest {what} that fits")
        tim.legend(fontsize=7)
    else:
        tim.text(0.5, 0.5, "no step time (the GPU has no rates)", ha="center", va="center", transform=tim.transAxes)
    tim.set_xlabel(xlabel)
    tim.set_ylabel("step time (ms)")
    if ladder:
        _ladder_axes(axes[2], ladder, usable)
    return fig


def fit_headline(data: Mapping[str, Any]) -> str:
    """What fit answered, as its text says it: the rung that makes the target fit, else the largest batch."""
    answer = data.get("answer")
    if data.get("axis") == "resolution":
        side = data.get("max_image_size") or 0
        return f"largest image {side}×{side} px" if side else "the smallest image does not fit"
    if answer:
        batch = answer["effective_batch_size"]
        return (f"batch {batch} fits as given" if answer["technique"] == "as-given"
                else f"batch {batch} fits with {str(answer['technique']).replace('-', ' ')}")
    if data["max_batch_size"]:
        return f"largest batch {data['max_batch_size']}"
    return f"batch {data.get('target_batch_size') or 1} does not fit"


def _ladder_axes(ax: Axes, ladder: Sequence[Mapping[str, Any]], usable: int) -> None:
    needs = [int(t["min_required_bytes"]) for t in ladder]
    div, unit = _scale(max([usable, *needs]))
    names = [str(t["technique"]) for t in ladder]
    ys = list(range(len(ladder)))[::-1]  # first rung on top
    ax.barh(ys, [n / div for n in needs], color=[FIT_COLOR if t["fits"] else MISS_COLOR for t in ladder], height=0.6)
    ax.set_ylim(-0.7, max(len(ladder), 3) - 0.3)
    ax.set_yticks(ys, names, fontsize=8)
    ax.axvline(usable / div, color=LIMIT_COLOR, linestyle="--", linewidth=1.2, label="usable")
    ax.set_xlabel(f"memory needed ({unit})")
    ax.set_title("technique ladder at the target batch", fontsize=9)
    ax.legend(fontsize=7)


# --- plan -------------------------------------------------------------------------------------

RANK_PARTS: tuple[str, ...] = ("parameters", "gradients", "optimizer_state", "communication_buffers",
                               "cuda_context_and_workspaces", "allocator_slack")
TIME_GROUPS: dict[str, tuple[str, ...]] = {
    "compute": ("compute",),
    "exposed communication": ("tp_comm", "pp_comm", "shard_comm_exposed", "dp_comm_exposed"),
    "pipeline bubble": ("pipeline_bubble",),
    "optimizer": ("optimizer",),
}
TIME_COLORS = {"compute": "#4c72b0", "exposed communication": "#dd8452", "pipeline bubble": "#8c8c8c",
               "optimizer": "#55a868", "other": "#b0b0b0"}


def plan_figure(data: Mapping[str, Any]) -> Figure:
    """Per-rank memory by component for the best layout and its alternatives, and each one's
    step-time breakdown (compute / exposed communication / pipeline bubble / optimizer)."""
    rows: list[tuple[str, Mapping[str, Any]]] = []
    for r in data["ranks"]:
        rows.append((f"best: {r['kind']}", r))
    for i, alt in enumerate(data.get("alternatives") or [], 1):
        worst = max(alt["ranks"], key=lambda r: int(r["total_bytes"]))
        rows.append((f"alt {i}: {worst['kind']}", worst))
    layouts = [("best", data["layout"], data["time_parts_s"], float(data["step_time_s"]))]
    layouts += [(f"alt {i}", a["layout"], a["time_parts_s"], float(a["step_time_s"]))
                for i, a in enumerate(data.get("alternatives") or [], 1)]
    fig = _figure(13.0, 2.6 + 0.45 * max(len(rows), len(layouts)))
    mem, tim = fig.subplots(1, 2)
    fig.suptitle(f"{plain(data['model'])} on {data['gpus']}× {data['gpu']}: {data['layout']}", fontsize=10)
    usable = int(data["usable_bytes_per_gpu"])
    div, unit = _scale(max([usable, *(int(r["total_bytes"]) for _, r in rows)]))
    ys = list(range(len(rows)))[::-1]
    parts = ["parameters", "gradients", "optimizer_state", "working", *RANK_PARTS[3:]]
    left = [0.0] * len(rows)
    for part in parts:
        # "working": activations, autocast copies or the optimizer step's temporaries, whichever the
        # rank's peak holds — the rest of its total, so each bar sums to the JSON total_bytes
        vals = [(int(r["total_bytes"]) - sum(int(r[p]) for p in RANK_PARTS)) if part == "working" else int(r[part])
                for _, r in rows]
        mem.barh(ys, [v / div for v in vals], left=left, color=COLORS[part], height=0.6,
                 label="activations or step temporaries" if part == "working" else label(part))
        left = [a + v / div for a, v in zip(left, vals, strict=True)]
    mem.axvline(usable / div, color=LIMIT_COLOR, linestyle="--", linewidth=1.2,
                label=f"usable {format_bytes(usable)}")
    mem.set_yticks(ys, [name for name, _ in rows], fontsize=8)
    mem.set_xlabel(f"memory per GPU ({unit})")
    mem.set_title(_peak_text("per-GPU peak", int(data["per_gpu_peak_bytes"])), fontsize=9)
    ys = list(range(len(layouts)))[::-1]
    left = [0.0] * len(layouts)
    for group in [*TIME_GROUPS, "other"]:
        ms = [_time_group(parts_s, group) * 1e3 for _, _, parts_s, _ in layouts]
        if any(ms):
            tim.barh(ys, ms, left=left, color=TIME_COLORS[group], label=group, height=0.6)
            left = [a + v for a, v in zip(left, ms, strict=True)]
    tim.set_yticks(ys, [f"{name}: {lay}" for name, lay, _, _ in layouts], fontsize=7)
    tim.set_xlabel("step time (ms)")
    tim.set_title(f"step time {float(data['step_time_s']) * 1e3:.4g} ms (best)", fontsize=9)
    # legends below the figure, in space the constrained layout reserves: never under an axis title
    mem_handles, mem_labels = mem.get_legend_handles_labels()
    fig.legend(mem_handles, mem_labels, loc="outside lower left", ncol=3, fontsize=7, frameon=False)
    tim_handles, tim_labels = tim.get_legend_handles_labels()
    fig.legend(tim_handles, tim_labels, loc="outside lower right", ncol=3, fontsize=7, frameon=False)
    return fig


def _time_group(parts_s: Mapping[str, float], group: str) -> float:
    if group == "other":
        known = {k for keys in TIME_GROUPS.values() for k in keys}
        return sum(float(v) for k, v in parts_s.items() if k not in known)
    return sum(float(parts_s.get(k, 0.0)) for k in TIME_GROUPS[group])


# --- recommend --------------------------------------------------------------------------------

def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both coordinates (lower is better), by x."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], points[i][1]))
    front: list[int] = []
    best_y = float("inf")
    for i in order:
        if points[i][1] < best_y:
            front.append(i)
            best_y = points[i][1]
    return front


def recommend_figure(data: Mapping[str, Any], top: int = 20) -> Figure:
    """Step time per GPU option that fits (fastest first), and time against cost — $ per million
    tokens/samples with prices, else the purchase price — with the Pareto front marked."""
    cands = [c for c in data["recommendations"] if c.get("step_time_s")]
    fig = _figure(13.0, 1.8 + 0.3 * min(len(cands), top))
    times, costs = fig.subplots(1, 2)
    fig.suptitle(f"{plain(data['model'])}: GPU options that fit ({len(data['recommendations'])})")
    shown = cands[:top]
    ys = list(range(len(shown)))[::-1]
    times.barh(ys, [float(c["step_time_s"]) * 1e3 for c in shown], color="#4c72b0", height=0.6)
    times.set_yticks(ys, [f"{c['count']}× {c['gpu']}" for c in shown], fontsize=7)
    times.set_xlabel("step time (ms)")
    times.set_title("fastest first" + (f" (top {top} of {len(cands)})" if len(cands) > top else ""), fontsize=9)
    key, label = ("cost_per_million_usd", "$ per million") if any(c.get("cost_per_million_usd") for c in cands) \
        else ("purchase_usd", "purchase price ($)")
    priced = [c for c in cands if c.get(key)]
    if not priced:
        costs.text(0.5, 0.5, "no prices known (pass --prices FILE)", ha="center", va="center",
                   transform=costs.transAxes)
        costs.set_axis_off()
        return fig
    pts = [(float(c["step_time_s"]) * 1e3, float(c[key])) for c in priced]
    front = pareto_front(pts)
    costs.scatter([p[0] for p in pts], [p[1] for p in pts], color="#9aa9c9", label="option", zorder=2)
    costs.plot([pts[i][0] for i in front], [pts[i][1] for i in front], color=MISS_COLOR, marker="o",
               label=f"Pareto front ({len(front)})", zorder=3)
    for i in front:
        costs.annotate(f"{priced[i]['count']}× {priced[i]['gpu']}", pts[i], xytext=(4, 4),
                       textcoords="offset points", fontsize=7)
    costs.set_xlabel("step time (ms)")
    costs.set_ylabel(label)
    costs.legend(fontsize=7)
    return fig


# --- serve ------------------------------------------------------------------------------------

SERVE_PARTS: tuple[str, ...] = ("weights_bytes", "activation_peak_bytes", "non_torch_bytes", "cuda_graph_bytes",
                                "cuda_context_bytes", "kv_cache_bytes")
SERVE_COLORS: dict[str, str] = {"weights_bytes": COLORS["parameters"], "activation_peak_bytes": COLORS["activations"],
                                "non_torch_bytes": "#b0b0b0", "cuda_graph_bytes": "#64b5cd",
                                "cuda_context_bytes": COLORS["cuda_context"], "kv_cache_bytes": COLORS["kv_cache"]}


def serve_figure(data: Mapping[str, Any]) -> Figure:
    """Per-GPU memory of the serving engine (weights, profile-run activations, non-torch, CUDA
    graphs, KV cache) against the GPU and the engine's budget, and the prefill / decode step split."""
    fig = _figure(11.0, 4.6)
    mem, tim = fig.subplots(1, 2, width_ratios=[1, 2])
    fig.suptitle(f"{plain(data['model'])} served by {data['engine']['name']} on {data['gpu']}: {plain(data['reason'])}",
                 fontsize=9)
    total, budget = int(data["total_memory_bytes"]), int(data["requested_memory_bytes"])
    div, unit = _scale(total)
    bottom = 0.0
    for part in SERVE_PARTS:
        value = int(data.get(part) or 0)
        if value:
            mem.bar([0], [value / div], bottom=bottom, color=SERVE_COLORS[part], width=0.6,
                    label=label(part))
            bottom += value / div
    mem.axhline(total / div, color=LIMIT_COLOR, linestyle="--", linewidth=1.2, label=_peak_text("GPU", total))
    mem.axhline(budget / div, color=MISS_COLOR, linestyle=":", linewidth=1.2, label=_peak_text("engine budget", budget))
    mem.set_xticks([0], ["per GPU"])
    mem.set_xlim(-0.6, 0.6)
    mem.set_ylabel(unit)
    mem.set_title(_peak_text("KV cache", int(data["kv_cache_bytes"])).replace(" (", "\n("), fontsize=8)
    handles, labels = mem.get_legend_handles_labels()
    mem.legend(handles[::-1], labels[::-1], loc="upper left", bbox_to_anchor=(0.0, -0.08), fontsize=7, frameon=False)
    steps = [(name, data[name]) for name in ("prefill", "decode") if data.get(name)]
    ys = list(range(len(steps)))[::-1]
    left = [0.0] * len(steps)
    for key, color in (("compute_s", "#4c72b0"), ("memory_s", "#dd8452"), ("communication_s", "#55a868")):
        ms = [float(step.get(key) or 0.0) * 1e3 for _, step in steps]
        if any(ms):
            tim.barh(ys, ms, left=left, color=color, height=0.6, label=label(key))
            left = [a + v for a, v in zip(left, ms, strict=True)]
    tim.set_yticks(ys, [f"{name} ({step.get('tokens') or step.get('batch')} "
                        f"{'tokens' if name == 'prefill' else 'sequences'})" for name, step in steps], fontsize=8)
    tim.set_xlabel("time of one step (ms)")
    tim.legend(fontsize=7)
    return fig


# --- output -----------------------------------------------------------------------------------

def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` as PNG or SVG (by the suffix). SVG keeps text as text and carries no date, so
    the file is searchable and the same input gives the same bytes."""
    p = check_plot_path(path)
    fmt = p.suffix.lower().lstrip(".")
    try:
        p.write_bytes(figure_bytes(fig, fmt))
    except OSError as exc:
        raise ConfigError(f"--plot {str(path)!r}: cannot write it ({exc.strerror}); pick a writable path") from None
    return p


def figure_bytes(fig: Figure, fmt: str) -> bytes:
    import matplotlib

    buf = io.BytesIO()
    metadata: dict[str, Any] = {"Date": None} if fmt == "svg" else {"Software": None}
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "gpuplan"}):
        fig.savefig(buf, format=fmt, metadata=metadata, dpi=110)
    return buf.getvalue()


def figure_svg(fig: Figure) -> str:
    """The figure as inline SVG markup (no XML prolog), for the HTML report."""
    text = figure_bytes(fig, "svg").decode("utf-8")
    return text[text.find("<svg"):]


def estimate_timeline(est: Estimate) -> MemoryTimeline | None:
    """Live bytes by category after every op of the traced run (the trace's own category rule)."""
    from gpuplan.trace.scaling import category_vectors

    run = est.step.run
    if run is None or not run.trace.points:
        return None
    trace = run.trace
    vectors = category_vectors(trace, range(len(trace.points)))
    ordered = [vectors[i] for i in range(len(trace.points))]
    return MemoryTimeline(
        phases=tuple(p.phase for p in trace.points),
        live_bytes={c: tuple(v[c] for v in ordered) for c in TRACE_CATEGORIES},
        traced_blocks=dict(est.step.traced_blocks) if est.step.block_counts else {},
    )
