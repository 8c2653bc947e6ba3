"""Each verb's presentation, described once for the CLI (``--plot``, ``--html``) and the web page: the
picture drawn from its ``--json`` object (and the result, where the picture needs the trace), the
picture's caption and the HTML report's tables. matplotlib is imported only when a picture is drawn."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from gpuplan.report.html import mapping_table, records_table

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def estimate_sections(data: Mapping[str, Any]) -> list[str]:
    return [mapping_table("Memory components", data["components"], in_bytes=True),
            mapping_table("Workload", data["workload"]),
            records_table("Top activation modules", data.get("top_activation_modules") or []),
            mapping_table("Step time by op class (s)", (data.get("time") or {}).get("by_op_class_s") or {}),
            *pipeline_sections(data)]


def pipeline_sections(data: Mapping[str, Any]) -> list[str]:
    """A diffusion pipeline's components and its peak per phase (an estimate's ``pipeline`` object)."""
    p = data.get("pipeline")
    if not p:
        return []
    return [records_table("Pipeline components", p.get("components") or []),
            mapping_table("Peak live tensors by phase", p.get("phase_peak_bytes") or {}, in_bytes=True)]


def pipeline_serve_sections(data: Mapping[str, Any]) -> list[str]:
    """``gpuplan serve PIPELINE``: the per-output answer, then the estimate's tables."""
    answer = {k: v for k, v in data.items() if k not in ("estimate",)}
    return [mapping_table("Generations on one GPU", answer), *estimate_sections(data["estimate"])]


def fit_sections(data: Mapping[str, Any]) -> list[str]:
    batches = [p for p in (data.get("max_batch"), data.get("max_batch_plus_one")) if p]
    return [records_table("Largest batch and batch + 1", batches),
            records_table("Technique ladder", data.get("techniques") or []),
            mapping_table("Workload", data["workload"])]


def resolution_fit_sections(data: Mapping[str, Any]) -> list[str]:
    points = [p for p in (data.get("max_image_size_point"), data.get("max_image_size_plus_step")) if p]
    return [records_table("Largest image size and one step more", points), mapping_table("Workload", data["workload"])]


def plan_sections(data: Mapping[str, Any]) -> list[str]:
    alts = [{"layout": a["layout"], "fits": a["fits"], "per_gpu_peak_bytes": a["per_gpu_peak_bytes"],
             "step_time_s": a["step_time_s"], "why_not": a["why_not"]} for a in data.get("alternatives") or []]
    return [mapping_table("Parallelism", data["parallelism"]),
            records_table("Memory per rank (best layout)", data["ranks"]),
            mapping_table("Step time parts (s)", data["time_parts_s"]),
            records_table("Alternatives", alts)]


def recommend_sections(data: Mapping[str, Any]) -> list[str]:
    return [records_table("GPU options that fit, fastest first", data["recommendations"]),
            records_table("Cheapest first", data.get("by_cost") or []),
            records_table("Excluded", data.get("excluded") or [])]


def serve_sections(data: Mapping[str, Any]) -> list[str]:
    return [mapping_table("Engine", data["engine"]), mapping_table("Attention", data.get("attention") or {}),
            mapping_table("Prefill", data.get("prefill") or {}), mapping_table("Decode", data.get("decode") or {})]


def _estimate_figure(data: Mapping[str, Any], result: Any) -> Figure:
    from gpuplan.report.plot import estimate_figure, estimate_timeline

    return estimate_figure(data, estimate_timeline(result))


def _fit_figure(data: Mapping[str, Any], result: Any) -> Figure:
    from gpuplan.report.plot import fit_figure

    return fit_figure(data, [p.to_dict() for p in result.probes])


def _plan_figure(data: Mapping[str, Any], result: Any) -> Figure:
    from gpuplan.report.plot import plan_figure

    return plan_figure(data)


def _recommend_figure(data: Mapping[str, Any], result: Any) -> Figure:
    from gpuplan.report.plot import recommend_figure

    return recommend_figure(data)


def _serve_figure(data: Mapping[str, Any], result: Any) -> Figure:
    from gpuplan.report.plot import serve_figure

    return serve_figure(data)


@dataclass(frozen=True, slots=True)
class VerbView:
    """How one verb's answer is shown beyond its JSON and text (both made by the result's renderers)."""

    verb: str
    caption: str
    """What the picture shows, in one sentence (the web page's figure caption)."""
    figure: Callable[[Mapping[str, Any], Any], Figure]
    """(the --json object, the result) -> the --plot picture."""
    sections: Callable[[Mapping[str, Any]], list[str]]
    """The --html report's tables."""


VIEWS: Final[Mapping[str, VerbView]] = {
    "estimate": VerbView("estimate", "Memory over the traced step by category, phases shaded, and the whole "
                         "requirement by component", _estimate_figure, estimate_sections),
    "fit": VerbView("fit", "Memory and step time against batch size: the largest batch that fits", _fit_figure,
                    fit_sections),
    "plan": VerbView("plan", "Memory per rank by component and the step time's parts, best layout and "
                     "alternatives", _plan_figure, plan_sections),
    "recommend": VerbView("recommend", "Step time (or cost) per GPU option, the Pareto front marked",
                          _recommend_figure, recommend_sections),
    "serve": VerbView("serve", "One GPU's memory as the engine budgets it against its budget, and the prefill / "
                      "decode step split",
                      _serve_figure, serve_sections),
}
