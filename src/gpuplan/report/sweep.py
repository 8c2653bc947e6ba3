"""``gpuplan sweep`` results → JSON and text: per planned layout, predicted next to measured."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuplan.report.text import table
from gpuplan.units import format_bytes, format_seconds

if TYPE_CHECKING:
    from gpuplan.measure.sweep import Sweep, SweepRow


def _row_to_dict(r: SweepRow) -> dict[str, Any]:
    from gpuplan.report.measure import measurement_to_dict

    m = r.measurement
    device = m.environment.device if m is not None else None
    return {
        "position": r.position,
        "layout": r.layout,
        "measured_layout": r.measured_layout,
        "gpus": r.gpus,
        "micro_batch_size": r.micro_batch_size,
        "predicted": {"step_time_s": r.predicted_step_time_s,
                      "step_time_interval_s": r.predicted_interval.to_list() if r.predicted_interval else None,
                      "per_gpu_bytes": r.predicted_per_gpu_bytes},
        "measured": None if m is None else {
            "device": device,
            "step_time_s": r.measured_step_time_s,
            "peak_bytes": r.measured_peak_bytes,
            "peak_kind": "reserved + context" if device == "cuda" else "storage-tracked (host)",
        },
        "comparison": [c.to_dict() for c in r.comparisons],  # GPU runs only
        "skipped": r.skipped,
        "store_id": r.store_id,
        "measurement": measurement_to_dict(m) if m is not None else None,
    }


def sweep_to_dict(s: Sweep) -> dict[str, Any]:
    return {
        "model": s.model,
        "gpu": s.gpu,
        "launcher": s.launcher,
        "steps": s.steps,
        "measured": s.measured,
        "layouts": [_row_to_dict(r) for r in s.rows],
        "notes": list(s.notes),
        "store": {"path": s.store_path} if s.store_path else None,
    }


def _cell(value: float | None, fmt: Any) -> str:
    return "n/a" if value is None else str(fmt(value))


def render_sweep(s: Sweep) -> str:
    rows = []
    for r in s.rows:
        device = r.measurement.environment.device if r.measurement is not None else None
        step_err = r.comparisons[0].error if r.comparisons else None
        rows.append((str(r.position), r.layout, format_seconds(r.predicted_step_time_s),
                     r.predicted_interval.span() if r.predicted_interval else "-",
                     _cell(r.measured_step_time_s, format_seconds),
                     "n/a" if step_err is None else f"{step_err:+.1%}",
                     format_bytes(r.predicted_per_gpu_bytes), _cell(r.measured_peak_bytes, format_bytes),
                     device or "-"))
    lines = [f"{s.model} on {s.rows[0].gpus if s.rows else 0}× {s.gpu}: top {len(s.rows)} planned layouts, "
             f"{s.steps} timed steps each ({s.launcher} launcher); {s.measured} measured",
             "",
             table(rows, ("#", "layout", "predicted step", "80%", "measured step", "error", "predicted/GPU",
                          "measured/GPU", "ran on"), "llrrrrrrl")]
    basis = next((r.predicted_interval for r in s.rows if r.predicted_interval), None)
    if basis is not None:
        lines.append(f"80%: prediction interval of the predicted step, from {basis.basis}")
    skipped = [r for r in s.rows if r.skipped]
    if skipped:
        lines += ["", "not measured:"] + [f"  {r.position}. {r.layout}: {r.skipped}" for r in skipped]
    if s.store_path:
        lines += ["", f"stored in {s.store_path}, as gpuplan measure stores runs (gpuplan calibrate fits "
                      "single-process GPU runs only)"]
    lines += [f"note: {n}" for n in s.notes]
    return "\n".join(lines) + "\n"
