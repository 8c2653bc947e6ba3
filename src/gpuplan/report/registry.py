"""Which renderer presents which result type (gpuplan/presentation.py): the result modules never import
``report/``; this module, imported by ``gpuplan/__init__.py``, ties them together by type name.
Importing it imports only the renderers (no result module, no torch)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuplan.presentation import JSON, TEXT, register
from gpuplan.report import advise, json_report, local_serve, measure, plan, rl, serve, sweep, text

RENDERERS: dict[tuple[str, str], Callable[[Any], Any]] = {
    ("gpuplan.estimate.Estimate", JSON): json_report.estimate_to_dict,
    ("gpuplan.estimate.Estimate", TEXT): text.render_estimate,
    ("gpuplan.serve.capacity.ServeResult", JSON): serve.serve_to_dict,
    ("gpuplan.serve.capacity.ServeResult", TEXT): serve.render_serve,
    ("gpuplan.serve.layouts.LayoutSearch", JSON): serve.layout_search_to_dict,
    ("gpuplan.serve.layouts.LayoutSearch", TEXT): serve.render_layout_search,
    ("gpuplan.serve.disaggregate.Disaggregation", JSON): serve.disaggregation_to_dict,
    ("gpuplan.serve.disaggregate.Disaggregation", TEXT): serve.render_disaggregation,
    ("gpuplan.serve.llamacpp.LocalServeResult", JSON): local_serve.local_serve_to_dict,
    ("gpuplan.serve.llamacpp.LocalServeResult", TEXT): local_serve.render_local_serve,
    ("gpuplan.serve.pipeline.PipelineServe", TEXT): serve.render_pipeline_serve,
    ("gpuplan.parallel.plan.Plan", JSON): plan.plan_to_dict,
    ("gpuplan.parallel.plan.Plan", TEXT): plan.render_plan,
    ("gpuplan.advise.fit.FitResult", TEXT): advise.render_fit,
    ("gpuplan.advise.fit.SeqLenFit", TEXT): advise.render_seq_len_fit,
    ("gpuplan.advise.fit.ResolutionFit", TEXT): advise.render_resolution_fit,
    ("gpuplan.advise.recommend.Recommendation", TEXT): advise.render_recommendation,
    ("gpuplan.advise.recommend.ServeRecommendation", TEXT): serve.render_serve_recommendation,
    ("gpuplan.rl.result.RLResult", JSON): rl.rl_to_dict,
    ("gpuplan.rl.result.RLResult", TEXT): rl.render_rl,
    ("gpuplan.measure.results.Measurement", JSON): measure.measurement_to_dict,
    ("gpuplan.measure.results.Measurement", TEXT): measure.render_measurement,
    ("gpuplan.measure.sweep.Sweep", JSON): sweep.sweep_to_dict,
    ("gpuplan.measure.sweep.Sweep", TEXT): sweep.render_sweep,
}

for (_name, _kind), _renderer in RENDERERS.items():
    register(_name, _kind, _renderer)
