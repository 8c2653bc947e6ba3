"""``gpuplan.estimate``: peak GPU memory of one step of a workload, traced on fake tensors.

Pipeline: resolve MODEL → trace the step (3 and 2 repeated blocks when the model has a layer
count, else whole) → scale to the full depth → replay the allocations through the CUDA caching
allocator model → add CUDA context and cuBLAS workspaces for the target GPU.

Known limitations: one device and one stream; MoE routing with data-dependent shapes is not
traceable under fake tensors; the cuDNN convolution workspace (algorithm-dependent) is not
counted; allocator slack at full depth is extrapolated from the reduced-depth replays.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuplan.errors import ConfigError
from gpuplan.hardware import resolve_gpu
from gpuplan.memory.on_gpu import COMPONENT_NAMES, memory_on_gpu
from gpuplan.trace.step import DEFAULT_COMPUTE_CAPABILITY, TracedStep, trace_source, trace_step
from gpuplan.workload import Workload

if TYPE_CHECKING:
    from gpuplan.hardware import GPU
    from gpuplan.models.sources import ModelSource

# the trace record and the GPU-side terms live below this orchestrator; names kept here for callers
__all__ = ["COMPONENT_NAMES", "DEFAULT_COMPUTE_CAPABILITY", "Estimate", "TracedStep", "estimate",
           "make_workload", "memory_on_gpu", "trace_step"]

@dataclass(frozen=True, slots=True)
class Estimate:
    """Memory (and, with a GPU, fit) of one step. Every ``*_bytes`` field is an int of bytes."""

    model: str
    workload: Workload
    params_count: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    total_required_bytes: int
    components: dict[str, int]
    peak_phase: str
    flops_per_step: int
    step: TracedStep
    gpu: GPU | None = None
    fits: bool | None = None
    headroom_bytes: int | None = None
    step_time_s: float | None = None
    throughput: dict[str, Any] | None = None
    mfu: float | None = None
    min_required_bytes: int = 0
    """The least GPU memory (context included) on which the step runs: the caching allocator
    releases cached blocks under pressure, so this is at most ``total_required_bytes``."""
    assumptions: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def tensor_peak_bytes(self) -> int:
        return self.step.tensor_peak_bytes

    def to_dict(self) -> dict[str, Any]:
        from gpuplan.report.json_report import estimate_to_dict

        return estimate_to_dict(self)

    def __str__(self) -> str:
        from gpuplan.report.text import render_estimate

        return render_estimate(self)


def estimate(
    model: str | ModelSource,
    *,
    gpu: str | GPU | None = None,
    cuda_module_loading: str = "lazy",
    weight_quant: str = "none",
    **workload_fields: Any,
) -> Estimate:
    """Estimate peak GPU memory of one step of ``model`` under the workload given by keywords.

    ``model`` is any MODEL accepted by the command line; ``workload_fields`` are the fields of
    :class:`gpuplan.Workload` (``mode``, ``batch_size``, ``seq_len``, ``precision``, ...).
    With a ``gpu``, the cost model (gpuplan.perf) adds step time, throughput and MFU;
    ``weight_quant`` (none | int8 | fp8 | int4) costs generation's decode with weight-only quantized weights.

    Example::

        est = gpuplan.estimate("gpt2", mode="train", batch_size=8, seq_len=1024, precision="amp-bf16",
                               gpu="H100-SXM")
        est.peak_allocated_bytes, est.components, est.fits
    """
    from gpuplan.models.sources import ModelSource, resolve_model

    given = workload_fields.pop("workload", None)
    if given is not None and workload_fields:
        raise ConfigError("pass either workload= or workload fields, not both")
    workload = given if given is not None else make_workload(**workload_fields)
    if cuda_module_loading not in ("lazy", "eager"):
        raise ConfigError(f"unknown CUDA module loading {cuda_module_loading!r} (allowed: lazy, eager)")
    source = model if isinstance(model, ModelSource) else resolve_model(model)
    target_gpu = resolve_gpu(gpu)
    cc = (target_gpu.compute_capability if target_gpu is not None and target_gpu.compute_capability
          else DEFAULT_COMPUTE_CAPABILITY)
    assumptions: list[str] = []
    if target_gpu is None:
        assumptions.append("no --gpu: kernels chosen as on an sm_90 GPU (flash attention available)")
    _check_precision(workload, target_gpu)
    step = trace_source(source, workload, cc, fake=True, cuda=True)
    mem = memory_on_gpu(step, target_gpu, trains=workload.trains, module_loading=cuda_module_loading)
    assumptions.extend(mem.notes)
    timing = None
    if target_gpu is not None:
        from gpuplan.perf.summary import summarize_source

        # cost model (gpuplan.perf): step time, throughput, MFU and their assumptions
        timing = summarize_source(source, step, target_gpu, workload, weight_quant=weight_quant)
        assumptions.extend(timing.assumptions)
    result = Estimate(
        model=source.name, workload=workload, params_count=step.params_count,
        peak_allocated_bytes=mem.peak_allocated_bytes, peak_reserved_bytes=mem.peak_reserved_bytes,
        total_required_bytes=mem.total_required_bytes, components=mem.components, peak_phase=step.peak_phase,
        flops_per_step=step.flops, step=step, gpu=target_gpu, fits=mem.fits, headroom_bytes=mem.headroom_bytes,
        assumptions=tuple(assumptions),
        step_time_s=timing.step_time_s if timing else None, throughput=timing.throughput if timing else None,
        mfu=timing.mfu if timing else None, min_required_bytes=mem.min_required_bytes,
        extra={"source": source.describe(), **({"json": timing.json} if timing else {})},
    )
    # a user calibration fitted from measurements on this GPU and software (gpuplan calibrate)
    from gpuplan.measure.calibration import apply_calibration

    return apply_calibration(result)  # type: ignore[no-any-return]


def make_workload(**fields: Any) -> Workload:
    """A Workload from keyword fields; an unknown field is a one-line ConfigError."""
    known = set(Workload.__dataclass_fields__)
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ConfigError(f"unknown workload field(s) {', '.join(unknown)} (allowed: {', '.join(sorted(known))})")
    return Workload(**fields)


def _check_precision(workload: Workload, gpu: GPU | None) -> None:
    if gpu is None:
        return
    if workload.precision in ("amp-bf16", "bf16") and not gpu.has_bf16:
        raise ConfigError(f"{gpu.id} has no bfloat16 support (compute capability "
                          f"{'.'.join(map(str, gpu.compute_capability or ()))}); use --precision amp-fp16")


class _CallableModule(types.ModuleType):
    """``gpuplan.estimate`` is both this module and the function: ``gpuplan.estimate("gpt2", ...)``
    works however the module was imported (importing a submodule rebinds the package attribute)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Estimate:
        return estimate(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
