"""``gpuplan.estimate``: peak GPU memory of one step of a workload, traced on fake tensors.

Pipeline: resolve MODEL → trace the step (3 and 2 repeated blocks when the model has a layer
count, else whole) → scale to the full depth → replay the allocations through the CUDA caching
allocator model → add CUDA context and cuBLAS workspaces for the target GPU (memory/on_gpu.py) →
with a GPU, time the step (perf/). A calibration is an explicit input applied inside both: its
measured context goes through ``memory_on_gpu``, its step-time factor through the timing.

Known limitations: one device and one stream; MoE routing with data-dependent shapes is not
traceable under fake tensors; the cuDNN convolution workspace (algorithm-dependent) is not
counted; allocator slack at full depth is extrapolated from the reduced-depth replays.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuplan.errors import ConfigError, require_choice
from gpuplan.hardware import DEFAULT_COMPUTE_CAPABILITY, resolve_gpu
from gpuplan.memory.on_gpu import COMPONENT_NAMES, memory_on_gpu
from gpuplan.memory.weight_quant import check_weight_quant
from gpuplan.trace.step import TracedStep, trace_source, trace_step
from gpuplan.workload import MODULE_LOADINGS, Workload, make_workload

if TYPE_CHECKING:
    from gpuplan.hardware import GPU
    from gpuplan.memory.weight_quant import QuantizedWeights
    from gpuplan.models.sources import ModelSource
    from gpuplan.perf.summary import Throughput, Timing
    from gpuplan.workload import (
        Attention,
        Checkpointing,
        Loss,
        Mode,
        ModuleLoading,
        Optimizer,
        OptimizerImpl,
        Precision,
        WeightQuant,
        ZeroGrad,
    )

# the trace record and the GPU-side terms live below this orchestrator; names kept here for callers
__all__ = ["COMPONENT_NAMES", "DEFAULT_COMPUTE_CAPABILITY", "Calibration", "Estimate", "TracedStep", "estimate",
           "make_workload", "memory_on_gpu", "trace_step"]


@dataclass(frozen=True, slots=True)
class Calibration:
    """Figures measured on one (GPU, torch, CUDA), fitted by ``gpuplan calibrate``
    (gpuplan.measure.calibration loads and writes them). An explicit input of :func:`estimate`."""

    gpu: str
    torch_version: str
    cuda_version: str
    cuda_context_bytes: int | None
    """Median measured context (process GPU memory outside the caching allocator)."""
    step_time_factor: float | None
    """Median of measured / estimated step time; estimates multiply every kernel time by it."""
    context_samples: int
    step_time_samples: int
    driver_versions: tuple[str, ...] = ()

    def describe(self) -> str:
        parts = []
        if self.cuda_context_bytes is not None:
            mib = self.cuda_context_bytes / 2**20
            parts.append(f"CUDA context {mib:.0f} MiB (median of {self.context_samples})")
        if self.step_time_factor is not None:
            parts.append(f"step time ×{self.step_time_factor:.3f} (median of {self.step_time_samples})")
        return (f"calibration applied for {self.gpu}, torch {self.torch_version}, CUDA {self.cuda_version}: "
                + "; ".join(parts))


@dataclass(frozen=True, slots=True)
class Estimate:
    """Memory (and, with a GPU, fit and time) of one step. Every ``*_bytes`` field is an int of bytes.

    Every figure comes from one calculation: ``step_time_s``, ``throughput`` and ``mfu`` are views of
    ``timing``; a ``calibration`` was applied inside it, never patched on afterwards."""

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
    min_required_bytes: int = 0
    """The least GPU memory (context included) on which the step runs: the caching allocator
    releases cached blocks under pressure, so this is at most ``total_required_bytes``."""
    assumptions: tuple[str, ...] = ()
    timing: Timing | None = None
    """Step time, its split, throughput, MFU and the generation split (with a GPU that has the rates)."""
    calibration: Calibration | None = None
    """The calibration applied (context and/or step-time factor), if any."""
    quantized_weights: QuantizedWeights | None = None
    """Weight-only quantization counted in the memory figures (``weight_quant``), if any."""

    @property
    def tensor_peak_bytes(self) -> int:
        """Live tensor bytes at the peak, before any GPU term (with quantized weights, as stored)."""
        saved = self.quantized_weights.memory_saved_bytes if self.quantized_weights is not None else 0
        return self.step.tensor_peak_bytes - saved

    @property
    def step_time_s(self) -> float | None:
        return self.timing.step_time_s if self.timing is not None else None

    @property
    def throughput(self) -> Throughput | None:
        return self.timing.throughput if self.timing is not None else None

    @property
    def mfu(self) -> float | None:
        return self.timing.mfu if self.timing is not None else None

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
    workload: Workload | None = None,
    mode: Mode | None = None,
    batch_size: int | None = None,
    seq_len: int | None = None,
    image_size: int | None = None,
    new_tokens: int | None = None,
    precision: Precision | None = None,
    optimizer: Optimizer | None = None,
    checkpointing: Checkpointing | None = None,
    grad_accum: int | None = None,
    attention: Attention | None = None,
    optimizer_impl: OptimizerImpl | None = None,
    zero_grad: ZeroGrad | None = None,
    loss: Loss | None = None,
    cuda_module_loading: ModuleLoading = "lazy",
    weight_quant: WeightQuant = "none",
    calibration: Calibration | None = None,
) -> Estimate:
    """Estimate peak GPU memory (and, with a ``gpu``, fit, step time, throughput, MFU) of one step.

    ``model`` is any MODEL accepted by the command line. The workload is either ``workload=`` or the
    :class:`gpuplan.Workload` fields as keywords (a field left out takes the Workload default).
    ``weight_quant`` (none | int8 | fp8 | int4; infer and generate) stores the weights weight-only
    quantized: counted in the memory figures and in the matmuls' weight reads. ``calibration`` (see
    :func:`gpuplan.measure.calibration.calibration_for`) replaces the assumed CUDA context by the
    measured one and scales the kernel times; the library never reads the calibration file itself.

    Example::

        est = gpuplan.estimate("gpt2", mode="train", batch_size=8, seq_len=1024, precision="amp-bf16",
                               gpu="H100-SXM")
        est.peak_allocated_bytes, est.components, est.fits
    """
    from gpuplan.models.sources import ModelSource, resolve_model

    fields = {k: v for k, v in (("mode", mode), ("batch_size", batch_size), ("seq_len", seq_len),
                                ("image_size", image_size), ("new_tokens", new_tokens), ("precision", precision),
                                ("optimizer", optimizer), ("checkpointing", checkpointing),
                                ("grad_accum", grad_accum), ("attention", attention),
                                ("optimizer_impl", optimizer_impl), ("zero_grad", zero_grad), ("loss", loss))
              if v is not None}
    if workload is not None and fields:
        raise ConfigError(f"pass either workload= or workload fields ({', '.join(fields)}), not both")
    work = workload if workload is not None else make_workload(**fields)
    require_choice("CUDA module loading", cuda_module_loading, MODULE_LOADINGS)
    check_weight_quant(weight_quant, trains=work.trains)  # before the trace: fail fast
    source = model if isinstance(model, ModelSource) else resolve_model(model)
    work = with_stated_seq_len(source, work)
    target_gpu = resolve_gpu(gpu)
    cal = _check_calibration(calibration, target_gpu)
    cc = (target_gpu.compute_capability if target_gpu is not None and target_gpu.compute_capability
          else DEFAULT_COMPUTE_CAPABILITY)
    assumptions: list[str] = []
    if target_gpu is None:
        assumptions.append("no --gpu: kernels chosen as on an sm_90 GPU (flash attention available)")
    _check_precision(work, target_gpu)
    from gpuplan.trace.float8 import fp8_notes
    from gpuplan.trace.optimizer_notes import optimizer_notes
    from gpuplan.trace.peft_count import peft_notes
    from gpuplan.trace.quant_format import quantization_notes

    refusals_first = [*quantization_notes(source, work, weight_quant), *fp8_notes(work)]  # before the trace
    step = trace_source(source, work, cc, fake=True, cuda=True)
    assumptions.extend([*refusals_first, *peft_notes(work, step),
                        *(optimizer_notes(work.optimizer) if work.trains else [])])
    mem = memory_on_gpu(step, target_gpu, trains=work.trains, module_loading=cuda_module_loading,
                        cuda_context_bytes=cal.cuda_context_bytes if cal else None, weight_quant=weight_quant)
    assumptions.extend(mem.notes)
    timing = None
    if target_gpu is not None:
        from gpuplan.perf.roofline import NoRateError
        from gpuplan.perf.summary import summarize_source

        factor = cal.step_time_factor if cal and cal.step_time_factor is not None else 1.0
        try:
            timing = summarize_source(source, step, target_gpu, work, weight_quant=weight_quant, time_factor=factor)
        except NoRateError as exc:
            assumptions.append(f"no step time: {exc}")
        else:
            assumptions.extend(timing.notes(target_gpu, work.batch_size))
    if cal is not None:
        assumptions.append(cal.describe())
    return Estimate(
        model=source.name, workload=work, params_count=step.params_count,
        peak_allocated_bytes=mem.peak_allocated_bytes, peak_reserved_bytes=mem.peak_reserved_bytes,
        total_required_bytes=mem.total_required_bytes, components=mem.components, peak_phase=step.peak_phase,
        flops_per_step=step.flops, step=step, gpu=target_gpu, fits=mem.fits, headroom_bytes=mem.headroom_bytes,
        min_required_bytes=mem.min_required_bytes, assumptions=tuple(assumptions), timing=timing,
        calibration=cal, quantized_weights=mem.quantized_weights,
    )


def with_stated_seq_len(source: ModelSource, workload: Workload) -> Workload:
    """``workload`` with the tokens per sample the trace will use written in (a token model run without
    --seq-len: the model's default, models/sources.DEFAULT_SEQ_LEN_CAP), so the header and the JSON state
    the length every figure is for instead of ``null``. The same step is traced: the source's rule
    returns a given length as is."""
    if workload.seq_len is not None:
        return workload
    from gpuplan.perf.summary import seq_len_of

    seq = seq_len_of(source, workload)
    return workload.with_(seq_len=seq) if seq else workload


def _check_calibration(calibration: Calibration | None, gpu: GPU | None) -> Calibration | None:
    """A calibration for another GPU is a usage error; without a GPU there is nothing to calibrate."""
    if calibration is None or gpu is None:
        return None
    if calibration.gpu != gpu.id:
        raise ConfigError(f"the calibration is for {calibration.gpu}, not {gpu.id}; pass the entry for {gpu.id} "
                          "(gpuplan.measure.calibration.calibration_for) or none")
    return calibration


def _check_precision(workload: Workload, gpu: GPU | None) -> None:
    if gpu is None:
        return
    if workload.precision == "fp8":
        from gpuplan.trace.float8 import check_fp8_gpu

        check_fp8_gpu(gpu.id, gpu.compute_capability, gpu.compute_capability_label)
    if workload.peft == "qlora" and not gpu.has_bf16:  # QLoRA's NF4 layers compute in bf16
        raise ConfigError(f"--peft qlora computes in bfloat16, which {gpu.id} lacks (compute capability "
                          f"{gpu.compute_capability_label}); use --peft lora with --precision amp-fp16, or a GPU "
                          "with bf16 (compute capability 8.0+)")
    if workload.precision in ("amp-bf16", "bf16") and not gpu.has_bf16:
        raise ConfigError(f"{gpu.id} has no bfloat16 support (compute capability "
                          f"{gpu.compute_capability_label}); use --precision amp-fp16")


class _CallableModule(types.ModuleType):
    """``gpuplan.estimate`` is both this module and the function: ``gpuplan.estimate("gpt2", ...)``
    works however the module was imported (importing a submodule rebinds the package attribute)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Estimate:
        return estimate(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
