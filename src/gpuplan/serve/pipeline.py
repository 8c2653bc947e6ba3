"""``gpuplan serve PIPELINE --gpu GPU``: what a diffusion / video pipeline delivers on one GPU.

A pipeline is not an engine holding sequences: one request is one generation (text encoders → ``--steps``
denoiser steps → VAE decode) of ``--batch-size`` images (or videos). Its answer is the estimate's
(gpuplan.estimate: one trace, memory per offload mode from memory/pipeline_offload.py, the whole
generation's time from the cost model and its 80% interval from perf/uncertainty) read per output:
seconds per image (video), images (videos) per hour on one GPU running generations back to back, and
with a price, dollars per 1,000 outputs. Nothing is timed again here.

``--quantization`` names the pipeline's weight formats with the serve verb's values (applied to
``--quantize-components``, default the denoiser): ``int8`` torchao int8 weight-only, ``fp8`` diffusers'
layerwise casting (fp8 storage, bf16 compute: ``estimate --weight-quant fp8-storage``), ``int4``
bitsandbytes NF4 (``estimate --load-in-4bit``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuplan.errors import ConfigError
from gpuplan.presentation import to_text

if TYPE_CHECKING:
    from gpuplan.estimate import Estimate
    from gpuplan.hardware import GPU
    from gpuplan.models.sources import ModelSource
    from gpuplan.perf.workload_family import TimeInterval
    from gpuplan.workload import Workload

PIPELINE_QUANTIZATION: dict[str, dict[str, str]] = {
    "none": {},
    "int8": {"component_quant": "int8"},
    "fp8": {"component_quant": "fp8-storage"},
    "int4": {"load_in": "4bit"},
}
"""serve's --quantization value -> the pipeline workload fields it sets (module docstring)."""

OUTPUTS_PER: int = 1000
"""Dollars are quoted per this many images (videos)."""


def pipeline_quantization(value: str) -> dict[str, str]:
    """The workload fields of ``--quantization VALUE`` for a pipeline, or one line naming the values."""
    if value not in PIPELINE_QUANTIZATION:
        raise ConfigError(
            f"--quantization {value}: diffusion pipelines take {', '.join(PIPELINE_QUANTIZATION)} "
            "(int8 torchao weight-only, fp8 diffusers layerwise casting, int4 bitsandbytes NF4)"
        )
    return PIPELINE_QUANTIZATION[value]


@dataclass(frozen=True, slots=True)
class PipelineServe:
    """One GPU running a pipeline's generations back to back."""

    estimate: Estimate
    price_per_hour_usd: float | None = None

    @property
    def unit(self) -> str:
        shape = self.estimate.pipeline_shape or {}
        return "video" if shape.get("frames") else "image"

    @property
    def ok(self) -> bool:
        return bool(self.estimate.fits)

    @property
    def outputs_per_generation(self) -> int:
        return self.estimate.workload.batch_size

    @property
    def seconds_per_output(self) -> float | None:
        t = self.estimate.step_time_s
        return t / self.outputs_per_generation if t else None

    @property
    def outputs_per_hour(self) -> float | None:
        s = self.seconds_per_output
        return 3600.0 / s if s else None

    @property
    def interval(self) -> TimeInterval | None:
        """80% interval of the whole generation (the estimate's)."""
        timing = self.estimate.timing
        return timing.interval if timing is not None else None

    def seconds_per_output_interval(self) -> list[float] | None:
        iv = self.interval
        n = self.outputs_per_generation
        return None if iv is None else [iv.low_s / n, iv.high_s / n]

    def outputs_per_hour_interval(self) -> list[float] | None:
        span = self.seconds_per_output_interval()
        return None if span is None else [3600.0 / span[1], 3600.0 / span[0]]

    @property
    def usd_per_outputs(self) -> float | None:
        """Dollars per OUTPUTS_PER images (videos) at ``price_per_hour_usd``."""
        per_hour = self.outputs_per_hour
        if self.price_per_hour_usd is None or not per_hour:
            return None
        return self.price_per_hour_usd / per_hour * OUTPUTS_PER

    def to_dict(self) -> dict[str, Any]:
        est = self.estimate
        return {
            "model": est.model,
            "kind": "pipeline",
            "gpu": est.gpu.id if est.gpu is not None else None,
            "unit": self.unit,
            "fits": est.fits,
            "outputs_per_generation": self.outputs_per_generation,
            "generation_s": est.step_time_s,
            "generation_interval_s": self.interval.to_list() if self.interval is not None else None,
            "seconds_per_output": self.seconds_per_output,
            "seconds_per_output_interval_s": self.seconds_per_output_interval(),
            "outputs_per_hour": self.outputs_per_hour,
            "outputs_per_hour_interval": self.outputs_per_hour_interval(),
            "price_per_hour_usd": self.price_per_hour_usd,
            f"usd_per_{OUTPUTS_PER}_outputs": self.usd_per_outputs,
            "estimate": est.to_dict(),
        }

    def __str__(self) -> str:
        return to_text(self)  # gpuplan/report/registry.py: report.serve.render_pipeline_serve


def serve_pipeline(
    source: ModelSource,
    gpu: str | GPU,
    workload: Workload,
    *,
    quantization: str = "none",
    prices: dict[str, float] | None = None,
) -> PipelineServe:
    """``workload`` (--mode infer) of the pipeline ``source`` on ``gpu``: gpuplan.estimate's answer, per output."""
    from gpuplan.estimate import estimate
    from gpuplan.hardware import resolve_gpu

    if workload.trains:
        raise ConfigError("gpuplan serve answers generations (--mode infer); for training use gpuplan estimate or fit")
    work = workload.with_(**pipeline_quantization(quantization))
    target = resolve_gpu(gpu)
    assert target is not None
    est = estimate(source, workload=work, gpu=target)
    return PipelineServe(est, (prices or {}).get(target.id))


__all__ = ["OUTPUTS_PER", "PIPELINE_QUANTIZATION", "PipelineServe", "pipeline_quantization", "serve_pipeline"]
