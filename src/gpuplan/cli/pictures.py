"""``--plot FILE.png|FILE.svg`` and ``--html FILE`` for estimate, fit, plan and recommend: the flags,
the early checks (before any tracing) and the writing. The pictures and the page are drawn by
report/plot.py and report/html.py from the result's JSON dict; stdout is never touched, so
``--json`` stays one object."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuplan.errors import ConfigError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from gpuplan.estimate import Estimate
    from gpuplan.report.plot import MemoryTimeline


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("pictures (optional extra: pip install 'gpuplan[plot]')")
    g.add_argument("--plot", default=None, metavar="FILE.png|FILE.svg", help="draw the result to this picture")
    g.add_argument("--html", default=None, metavar="FILE",
                   help="write one self-contained HTML report (tables, pictures, assumptions)")


def check_output_paths(args: argparse.Namespace) -> None:
    """Refuse a bad --plot/--html path, or missing matplotlib, before the (slow) work starts."""
    from gpuplan.report.plot import check_plot_path

    if args.plot is not None:
        check_plot_path(args.plot)
    if args.html is not None:
        parent = Path(args.html).parent
        if args.html.strip() == "-":  # not a file named '-': stdout already holds the answer (or the JSON)
            raise ConfigError("--html - would mix the page into stdout, which holds the answer; give a file name "
                              "(--html report.html)")
        if "\x00" in args.html:
            raise ConfigError(f"--html {args.html!r}: a path cannot hold a NUL character; pick another path")
        if not parent.is_dir():
            raise ConfigError(f"--html {args.html!r}: folder {str(parent)!r} does not exist; create it or pick "
                              "another path")
    if args.plot is not None or args.html is not None:
        from gpuplan.extras import PLOT, require

        require(PLOT)


def estimate_timeline(est: Estimate) -> MemoryTimeline | None:
    """Live bytes by category after every op of the traced run (the trace's own category rule)."""
    from gpuplan.report.plot import TRACE_CATEGORIES, MemoryTimeline
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


def write_outputs(args: argparse.Namespace, *, title: str, data: dict[str, Any], text: str,
                  figure: Callable[[], Figure], sections: Callable[[], Sequence[str]] = tuple) -> None:
    """Draw once, then write the picture and/or the page that the flags ask for."""
    if args.plot is None and args.html is None:
        return
    from gpuplan.report.plot import figure_svg, save_figure

    fig = figure()
    if args.plot is not None:
        save_figure(fig, args.plot)
    if args.html is not None:
        from gpuplan.report.html import render_html

        page = render_html(title, data, text=text, svgs=[figure_svg(fig)], sections=sections())
        try:
            Path(args.html).write_text(page, encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"--html {args.html!r}: cannot write it ({exc.strerror}); pick a writable path") from None


def estimate_sections(data: dict[str, Any]) -> list[str]:
    from gpuplan.report.html import mapping_table, records_table

    return [mapping_table("Memory components", data["components"], in_bytes=True),
            mapping_table("Workload", data["workload"]),
            records_table("Top activation modules", data.get("top_activation_modules") or []),
            mapping_table("Step time by op class (s)", (data.get("time") or {}).get("by_op_class_s") or {})]


def fit_sections(data: dict[str, Any]) -> list[str]:
    from gpuplan.report.html import mapping_table, records_table

    batches = [p for p in (data.get("max_batch"), data.get("max_batch_plus_one")) if p]
    return [records_table("Largest batch and batch + 1", batches),
            records_table("Technique ladder", data.get("techniques") or []),
            mapping_table("Workload", data["workload"])]


def plan_sections(data: dict[str, Any]) -> list[str]:
    from gpuplan.report.html import mapping_table, records_table

    alts = [{"layout": a["layout"], "fits": a["fits"], "per_gpu_peak_bytes": a["per_gpu_peak_bytes"],
             "step_time_s": a["step_time_s"], "why_not": a["why_not"]} for a in data.get("alternatives") or []]
    return [mapping_table("Parallelism", data["parallelism"]),
            records_table("Memory per rank (best layout)", data["ranks"]),
            mapping_table("Step time parts (s)", data["time_parts_s"]),
            records_table("Alternatives", alts)]


def recommend_sections(data: dict[str, Any]) -> list[str]:
    from gpuplan.report.html import records_table

    return [records_table("GPU options that fit, fastest first", data["recommendations"]),
            records_table("Cheapest first", data.get("by_cost") or []),
            records_table("Excluded", data.get("excluded") or [])]


def serve_figure(data: dict[str, Any]) -> Figure:
    from gpuplan.report.plot import serve_figure as draw

    return draw(data)


def serve_sections(data: dict[str, Any]) -> list[str]:
    from gpuplan.report.html import mapping_table

    return [mapping_table("Engine", data["engine"]), mapping_table("Attention", data.get("attention") or {}),
            mapping_table("Prefill", data.get("prefill") or {}), mapping_table("Decode", data.get("decode") or {})]
