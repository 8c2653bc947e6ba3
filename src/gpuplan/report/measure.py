"""``gpuplan measure`` results → JSON (the ``measured`` / ``estimated`` / ``comparison`` contract of
DESIGN.md) and → text: estimate and measurement side by side, with errors. Result types are
imported for type checking only: ``gpuplan.measure`` imports this module, never the other way round."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuplan.report.text import table
from gpuplan.units import format_bytes, format_seconds

if TYPE_CHECKING:
    from gpuplan.measure.results import Comparison, Measurement


def measurement_to_dict(m: Measurement) -> dict[str, Any]:
    measured: dict[str, Any] = m.measured.to_dict()
    if len(m.ranks) > 1:
        measured["ranks"] = [r.to_dict() for r in m.ranks]
    return {
        "model": m.model,
        "workload": m.workload.to_dict(),
        "environment": m.environment.to_dict(),
        "layout": m.layout,
        "nproc": len(m.ranks),
        "measured": measured,
        "estimated": m.estimated,
        "comparison": [c.to_dict() for c in m.comparisons],
        "notes": list(m.notes),
        "store": {"path": m.store_path, "id": m.store_id} if m.store_path else None,
    }


def _value(c: Comparison, v: float | None) -> str:
    if v is None:
        return "n/a"
    return format_bytes(v) if c.unit == "bytes" else format_seconds(v)


def _error(err: float | None) -> str:
    return "n/a" if err is None else f"{err:+.1%}"


def render_measurement(m: Measurement) -> str:
    env = m.environment
    where = f"{env.device_name} ({env.gpu_id})" if env.gpu_id else env.device_name
    w = m.workload
    lines = [
        f"{m.model}: {w.mode}, batch {w.batch_size}, {w.precision}"
        + (f", {len(m.ranks)} processes, {m.layout}" if m.layout else ""),
        f"measured on {env.device}: {where}; torch {env.torch_version}, CUDA {env.cuda_version or 'none'}"
        + (f", driver {env.driver_version}" if env.driver_version else ""),
        f"{m.measured.steps} timed steps after {m.measured.warmup} warm-up",
        "",
        table([(c.quantity, _value(c, c.estimated), _value(c, c.measured), _error(c.error))
               for c in m.comparisons], ("quantity", "estimated", "measured", "error"), "lrrr"),
    ]
    if len(m.ranks) > 1:
        rows = [(str(r.rank), format_bytes(r.tracked_peak_bytes) if r.tracked_peak_bytes else "n/a",
                 format_seconds(r.step_time_s)) for r in m.ranks]
        lines += ["", table(rows, ("rank", "tracked peak", "step time"), "rrr")]
    lines += [f"note: {n}" for n in m.notes]
    if m.store_path:
        lines.append(f"stored as #{m.store_id} in {m.store_path}")
    return "\n".join(lines)
