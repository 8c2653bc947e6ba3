"""The one registry of how each verb's answers are presented (issue 19 item 1), for the command line, the web
page and the result types' own ``to_dict()`` / ``str()``.

:data:`REGISTRY` maps a verb to the result types it answers with; each :class:`ResultView` gives one result
type's ``--json`` object and text (gpuplan/presentation.py asks for them: report/registry.py fills it from
here), its ``--plot`` picture, its ``--html`` tables and the web page's caption. ``cli/`` (``write_outputs``)
and ``ui/`` (the worker's picture, the page's caption and fieldset legend) look a result up here
(:func:`view_of`); the verbs' options are report/verb_options.py's, under the same verb names. The result
modules never import ``report/``. matplotlib is imported only when a picture is drawn."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from gpuplan.presentation import type_name
from gpuplan.report import advise, json_report, local_serve, measure, plan, rl, serve, sweep, text
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


Options = Mapping[str, Any]
"""The verb's option values by name (the command line's ``vars(args)``, the web page's ``Query.values()``)."""


def _estimate_figure(data: Mapping[str, Any], result: Any, options: Options) -> Figure:
    from gpuplan.report.plot import estimate_figure, estimate_timeline

    return estimate_figure(data, estimate_timeline(result))


def _pipeline_serve_figure(data: Mapping[str, Any], result: Any, options: Options) -> Figure:
    """``serve PIPELINE``: the generation's estimate (its memory over the traced step)."""
    from gpuplan.report.plot import estimate_figure, estimate_timeline

    return estimate_figure(data["estimate"], estimate_timeline(result.estimate))


def _fit_figure(data: Mapping[str, Any], result: Any, options: Options) -> Figure:
    from gpuplan.report.plot import fit_figure

    return fit_figure(data, [p.to_dict() for p in result.probes])


def _resolution_fit_figure(data: Mapping[str, Any], result: Any, options: Options) -> Figure:
    """fit --axis resolution: the batch picture with the image side on its axis."""
    from gpuplan.report.plot import fit_figure

    probes = [{**p.to_dict(), "batch_size": p.workload.image_size} for p in result.probes]
    return fit_figure({**data, "max_batch_size": data["max_image_size"], "axis_label": "image side (px)"}, probes)


def _plan_figure(data: Mapping[str, Any], result: Any, options: Options) -> Figure:
    from gpuplan.report.plot import plan_figure

    return plan_figure(data)


def _recommend_figure(data: Mapping[str, Any], result: Any, options: Options) -> Figure:
    from gpuplan.report.plot import recommend_figure

    top = options.get("top")  # the command line's --top (rows shown); the web page shows the picture's default
    return recommend_figure(data) if top is None else recommend_figure(data, top=int(top))


def _shown(result: Any) -> Mapping[str, Any]:
    """The one serve answer a layout search or a disaggregation is pictured by: the chosen layout's, the
    aggregated engine's."""
    one = result.shown if hasattr(result, "shown") else result.aggregated
    data: Mapping[str, Any] = one.to_dict() if one is not None else result.to_dict()
    return data


def _serve_figure(data: Mapping[str, Any], result: Any, options: Options) -> Figure:
    from gpuplan.report.plot import serve_figure

    return serve_figure(data)


def _shown_serve_figure(data: Mapping[str, Any], result: Any, options: Options) -> Figure:
    return _serve_figure(_shown(result), result, options)


def _shown_serve_sections(data: Mapping[str, Any], result: Any) -> list[str]:
    return serve_sections(_shown(result))


def _on_data(sections: Callable[[Mapping[str, Any]], list[str]]) -> Callable[[Mapping[str, Any], Any], list[str]]:
    """A sections function of the JSON object alone, as the registry calls it (the JSON, the result)."""
    return lambda data, result: sections(data)


@dataclass(frozen=True, slots=True)
class ResultView:
    """How one result type is presented."""

    type_name: str
    """The result type's dotted name (``gpuplan.estimate.Estimate``): the result modules are never imported here."""
    to_text: Callable[[Any], str]
    """Its terminal text: ``str(result)``."""
    to_json: Callable[[Any], dict[str, Any]] | None = None
    """Its ``--json`` object: ``result.to_dict()``; None where the type makes its own (a plain ``asdict``)."""
    figure: Callable[[Mapping[str, Any], Any, Options], Figure] | None = None
    """(the --json object, the result, the verb's options) -> the ``--plot`` picture; None: none is drawn."""
    sections: Callable[[Mapping[str, Any], Any], list[str]] | None = None
    """(the --json object, the result) -> the ``--html`` report's tables."""
    caption: str = ""
    """What the picture shows, in one sentence (the web page's figure caption)."""


@dataclass(frozen=True, slots=True)
class VerbReport:
    """One verb's answers: the result types it returns, each with its view."""

    verb: str
    legend: str
    """The web page's fieldset of the verb's options ("" for a verb the page does not offer)."""
    results: tuple[ResultView, ...]


_ESTIMATE_CAPTION: Final = ("Memory over the traced step by category, phases shaded, and the whole requirement by "
                            "component")
_SERVE_CAPTION: Final = ("One GPU's memory as the engine budgets it against its budget, and the prefill / decode "
                         "step split")

REGISTRY: Final[Mapping[str, VerbReport]] = {v.verb: v for v in (
    VerbReport("estimate", "Estimate", (
        ResultView("gpuplan.estimate.Estimate", text.render_estimate, json_report.estimate_to_dict, _estimate_figure,
                   _on_data(estimate_sections), _ESTIMATE_CAPTION),)),
    VerbReport("fit", "Fit", (
        ResultView("gpuplan.advise.fit.FitResult", advise.render_fit, None, _fit_figure, _on_data(fit_sections),
                   "Memory and step time against batch size: the largest batch that fits"),
        ResultView("gpuplan.advise.fit.SeqLenFit", advise.render_seq_len_fit),
        ResultView("gpuplan.advise.fit.ResolutionFit", advise.render_resolution_fit, None, _resolution_fit_figure,
                   _on_data(resolution_fit_sections),
                   "Memory and step time against the image side: the largest image size that fits"))),
    VerbReport("recommend", "Recommend", (
        ResultView("gpuplan.advise.recommend.Recommendation", advise.render_recommendation, None, _recommend_figure,
                   _on_data(recommend_sections), "Step time (or cost) per GPU option, the Pareto front marked"),
        ResultView("gpuplan.advise.recommend.ServeRecommendation", serve.render_serve_recommendation))),
    VerbReport("plan", "Plan (multi-GPU training)", (
        ResultView("gpuplan.parallel.plan.Plan", plan.render_plan, plan.plan_to_dict, _plan_figure,
                   _on_data(plan_sections),
                   "Memory per rank by component and the step time's parts, best layout and alternatives"),)),
    VerbReport("serve", "Serve (inference engine)", (
        ResultView("gpuplan.serve.capacity.ServeResult", serve.render_serve, serve.serve_to_dict, _serve_figure,
                   _on_data(serve_sections), _SERVE_CAPTION),
        ResultView("gpuplan.serve.layouts.LayoutSearch", serve.render_layout_search, serve.layout_search_to_dict,
                   _shown_serve_figure, _shown_serve_sections, _SERVE_CAPTION),
        ResultView("gpuplan.serve.disaggregate.Disaggregation", serve.render_disaggregation,
                   serve.disaggregation_to_dict, _shown_serve_figure, _shown_serve_sections, _SERVE_CAPTION),
        ResultView("gpuplan.serve.llamacpp.LocalServeResult", local_serve.render_local_serve,
                   local_serve.local_serve_to_dict),
        ResultView("gpuplan.serve.pipeline.PipelineServe", serve.render_pipeline_serve, None, _pipeline_serve_figure,
                   _on_data(pipeline_serve_sections), _ESTIMATE_CAPTION))),
    VerbReport("rl", "RL post-training (rl: the trainer's and the rollout's phases)", (
        ResultView("gpuplan.rl.result.RLResult", rl.render_rl, rl.rl_to_dict),)),
    VerbReport("measure", "", (
        ResultView("gpuplan.measure.results.Measurement", measure.render_measurement, measure.measurement_to_dict),)),
    VerbReport("sweep", "", (
        ResultView("gpuplan.measure.sweep.Sweep", sweep.render_sweep, sweep.sweep_to_dict),)),
)}

_BY_TYPE: Final[Mapping[str, ResultView]] = {r.type_name: r for v in REGISTRY.values() for r in v.results}


def view_of(result: object) -> ResultView:
    """The view of ``result``'s type; a LookupError (a bug: every result type is listed above) otherwise."""
    name = type_name(type(result))
    found = _BY_TYPE.get(name)
    if found is None:
        raise LookupError(f"no view registered for {name} (see gpuplan/report/verbs.py)")
    return found


def views() -> tuple[ResultView, ...]:
    """Every result type's view, each once."""
    return tuple(_BY_TYPE.values())


__all__ = ["REGISTRY", "ResultView", "VerbReport", "view_of", "views"]
