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
from gpuplan.hardware.support import check_workload_on_gpu
from gpuplan.memory.on_gpu import COMPONENT_NAMES, memory_on_gpu
from gpuplan.memory.weight_quant import check_weight_quant
from gpuplan.presentation import to_json, to_text
from gpuplan.trace.step import TracedStep, trace_source, trace_step
from gpuplan.units import format_bytes
from gpuplan.workload import MODULE_LOADINGS, Workload, make_workload

if TYPE_CHECKING:
    from gpuplan.hardware import GPU
    from gpuplan.memory.pipeline_offload import PipelinePlacement
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
    pipeline: PipelinePlacement | None = None
    """A diffusion pipeline's components: where each lives under the offload mode, host RAM, weight traffic."""
    component_params: dict[str, int] | None = None
    """A pipeline's parameters per component (full depth)."""
    offload_transfer_s: float | None = None
    """Seconds the host link adds to the generation for offloaded weights (included in ``step_time_s``)."""
    pipeline_shape: dict[str, int | None] | None = None
    """A pipeline's generation as modelled: steps, height, width, frames (its defaults filled in)."""
    time_unknown: str | None = None
    """Why there is no step time on ``gpu`` (no documented rate for the dtype); the memory answer stands."""

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
        return to_json(self)  # gpuplan/report/registry.py: report.json_report.estimate_to_dict

    def __str__(self) -> str:
        return to_text(self)  # gpuplan/report/registry.py: report.text.render_estimate


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
    source = model if isinstance(model, ModelSource) else resolve_model(model)
    pipeline_shape = None
    if source.kind == "pipeline":  # per component, inside the trace (trace/pipeline.py)
        work, weight_quant = _pipeline_weight_quant(source.name, work, weight_quant)
        shape = source.check_workload(work)  # type: ignore[attr-defined]
        pipeline_shape = {"steps": shape.steps, "height": shape.height, "width": shape.width, "frames": shape.frames}
    check_weight_quant(weight_quant, trains=work.trains)  # before the trace: fail fast
    work = with_stated_seq_len(source, work)
    target_gpu = resolve_gpu(gpu)
    cal = _check_calibration(calibration, target_gpu)
    cc = (target_gpu.compute_capability if target_gpu is not None and target_gpu.compute_capability
          else DEFAULT_COMPUTE_CAPABILITY)
    assumptions: list[str] = []
    if target_gpu is None:
        assumptions.append("no --gpu: kernels chosen as on an sm_90 GPU (flash attention available)")
    check_workload_on_gpu(work, target_gpu)  # the same refusal as every verb, before the trace
    _refuse_zero_offload(source.name, work)
    from gpuplan.trace.float8 import fp8_notes
    from gpuplan.trace.quant_format import quantization_notes

    refusals_first = [*quantization_notes(source, work, weight_quant), *fp8_notes(work)]  # before the trace
    step = trace_source(source, traced_workload(source, work), cc, fake=True, cuda=True)
    return estimate_from_step(source, step, work, target_gpu, weight_quant=weight_quant,
                              cuda_module_loading=cuda_module_loading, calibration=cal,
                              assumptions=(*assumptions, *refusals_first), pipeline_shape=pipeline_shape)


def traced_workload(source: ModelSource, work: Workload) -> Workload:
    """The workload the trace runs: a pipeline's offload mode is applied to the traced step afterwards
    (memory/pipeline_offload.py), so every offload mode reads the one trace (and its cache entry)."""
    return work.with_(offload="none") if source.kind == "pipeline" and work.offload != "none" else work


def estimate_from_step(source: ModelSource, step: TracedStep, work: Workload, target_gpu: GPU | None, *,
                       weight_quant: Any = "none", cuda_module_loading: ModuleLoading = "lazy",
                       calibration: Calibration | None = None, assumptions: tuple[str, ...] = (),
                       pipeline_shape: dict[str, int | None] | None = None, timed: bool = True) -> Estimate:
    """The estimate of an already traced ``step`` (``trace_source(source, traced_workload(source, work))``) on
    ``target_gpu``: everything :func:`estimate` does after its trace, so verbs that trace once and answer for
    many GPUs or offload modes (recommend, serve) read the same arithmetic. ``timed=False``: memory only."""
    from gpuplan.trace.optimizer_notes import optimizer_notes
    from gpuplan.trace.peft_count import peft_notes

    cal = calibration
    notes = [*assumptions, *peft_notes(work, step), *(optimizer_notes(work.optimizer) if work.trains else [])]
    placement = component_params = None
    gpu_step = step
    if source.kind == "pipeline":
        placement, component_params = _pipeline_placement(source, step, work)
        gpu_step = _offloaded(step, placement)
        notes.extend(_placement_notes(placement))
    mem = memory_on_gpu(gpu_step, target_gpu, trains=work.trains, module_loading=cuda_module_loading,
                        cuda_context_bytes=cal.cuda_context_bytes if cal else None, weight_quant=weight_quant)
    notes.extend(mem.notes)
    timing = None
    offload_s: float | None = None
    time_unknown: str | None = None
    if target_gpu is not None and timed:
        from gpuplan.perf.roofline import NoRateError
        from gpuplan.perf.summary import summarize_source

        factor = cal.step_time_factor if cal and cal.step_time_factor is not None else 1.0
        try:
            timing = summarize_source(source, step, target_gpu, work, weight_quant=weight_quant, time_factor=factor)
        except NoRateError as exc:
            time_unknown = str(exc)
            notes.append(f"no step time: {exc}")
        else:
            notes.extend(timing.notes(target_gpu, work.batch_size))
            if placement is not None and placement.transfer_bytes:
                timing, offload_s = _with_transfer(timing, placement, target_gpu)
            elif step.host_copy_bytes:
                timing, offload_s = _with_activation_offload(timing, step, target_gpu)
    if step.host_copy_bytes:
        notes.append(_activation_offload_note(step, offload_s))
    if cal is not None:
        notes.append(cal.describe())
    return Estimate(
        model=source.name, workload=work, params_count=step.params_count,
        peak_allocated_bytes=mem.peak_allocated_bytes, peak_reserved_bytes=mem.peak_reserved_bytes,
        total_required_bytes=mem.total_required_bytes, components=mem.components, peak_phase=gpu_step.peak_phase,
        flops_per_step=step.flops, step=gpu_step, gpu=target_gpu, fits=mem.fits, headroom_bytes=mem.headroom_bytes,
        min_required_bytes=mem.min_required_bytes, assumptions=tuple(notes), timing=timing,
        calibration=cal, quantized_weights=mem.quantized_weights, pipeline=placement,
        component_params=component_params, offload_transfer_s=offload_s, pipeline_shape=pipeline_shape,
        time_unknown=time_unknown,
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


def _pipeline_placement(source: ModelSource, step: TracedStep, work: Workload
                        ) -> tuple[PipelinePlacement, dict[str, int]]:
    """Where the pipeline's weights live under ``work.offload`` (memory/pipeline_offload.py), and its
    parameters per component (the denoiser's scaled to full depth like ``params_count``)."""
    from gpuplan.memory.pipeline_offload import place

    denoiser = str(getattr(source, "denoiser", "transformer"))
    run = step.run
    weights = dict(run.child_weights) if run is not None else {}
    component_bytes = {k: v for k, v in step.child_param_bytes.items() if k in weights and v}
    counts: dict[str, int] = {}
    for path, n in (run.module_params.items() if run is not None else ()):
        top = path.split(".", 1)[0]
        if top != denoiser and top in component_bytes:
            counts[top] = counts.get(top, 0) + n
    counts[denoiser] = step.params_count - sum(counts.values())
    calls = 0
    if not work.trains:
        repeats = source.op_repeats(work)
        passes = 2 if getattr(getattr(source, "spec", None), "family", None) is not None and \
            source.spec.family.guidance == "sequential" else 1  # type: ignore[attr-defined]
        calls = repeats.get(denoiser, 1) * passes
    placement = place(offload=work.offload, denoiser=denoiser, phase_peaks=step.phase_peaks,
                      component_bytes=component_bytes, child_weights=weights, denoiser_calls=calls)
    return placement, {k: counts.get(k, 0) for k in component_bytes}


def _offloaded(step: TracedStep, placement: PipelinePlacement) -> TracedStep:
    """The traced step as the GPU sees it under offload: every peak lowered by the weights left on the host
    (``--offload none``: unchanged)."""
    if placement.offload == "none":
        return step
    from dataclasses import replace

    saved = max(0, step.tensor_peak_bytes - placement.tensor_peak_bytes)
    live = placement.tensor_peak_bytes - placement.weight_bytes_at_peak
    return replace(step, tensor_peak_bytes=placement.tensor_peak_bytes, peak_phase=placement.peak_phase,
                   tensor_components={**dict.fromkeys(step.tensor_components, 0),
                                      "parameters": placement.weight_bytes_at_peak, "activations": max(0, live)},
                   rounded_peak_bytes=max(0, step.rounded_peak_bytes - saved),
                   reserved_peak_bytes=max(0, step.reserved_peak_bytes - saved),
                   min_reserved_bytes=max(0, step.min_reserved_bytes - saved))


def _placement_notes(placement: PipelinePlacement) -> list[str]:
    if placement.offload == "none":
        return ["every component resident on the GPU (--offload none); --offload model|sequential|group trade "
                "GPU memory for host RAM and weight copies"]
    return [f"--offload {placement.offload}: GPU peak in {placement.peak_phase} with "
            f"{placement.weight_bytes_at_peak / 2**30:.2f} GiB of weights there; host RAM holds up to "
            f"{placement.host_memory_bytes / 2**30:.2f} GiB of weights; {placement.transfer_bytes / 2**30:.1f} GiB "
            "copied host → GPU per generation"
            + (" (overlapped with compute by CUDA streams)" if placement.overlapped else " (not overlapped)")]


def _refuse_zero_offload(name: str, work: Workload) -> None:
    """``--offload params|optimizer`` is DeepSpeed ZeRO's offload: the planner's layouts, not one traced GPU."""
    asked = [k for k in ("params", "optimizer") if work.offloads(k)]
    if asked:
        raise ConfigError(f"--offload {','.join(asked)} is DeepSpeed ZeRO's CPU offload: plan it with `gpuplan plan "
                          f"{name} --gpus N --gpu GPU --offload {work.offload}` (estimate traces one GPU without "
                          "DeepSpeed; --offload activations alone applies here)")


def _activation_offload_note(step: TracedStep, added_s: float | None) -> str:
    timed = f", {added_s:.3g} s per step over the host link (not overlapped)" if added_s is not None else ""
    return (f"--offload activations: the checkpointed block inputs live on the host "
            f"({format_bytes(step.host_peak_bytes)} of pinned host memory at most); "
            f"{format_bytes(step.host_copy_bytes)} copied each way per step{timed}")


def _with_activation_offload(timing: Timing, step: TracedStep, gpu: GPU) -> tuple[Timing, float]:
    """The step's time with activation offload's copies over the host link (memory/offload.py)."""
    from gpuplan.memory.offload import activation_offload_time_s

    added = activation_offload_time_s(step.host_copy_bytes, gpu.pcie_gb_per_s_per_direction)
    return _with_added(timing, added), added


def _with_added(timing: Timing, added: float) -> Timing:
    """``timing`` with ``added`` seconds of host-link copies (``offload_transfer`` in the splits)."""
    from dataclasses import replace

    st = timing.time
    total = st.total_s + added
    new_st = replace(st, total_s=total, by_phase_s={**st.by_phase_s, "offload_transfer": added},
                     breakdown_s={**st.breakdown_s, "offload_transfer": added})
    scale = st.total_s / total if total else 1.0
    iv = timing.interval.of(total) if timing.interval is not None else None  # the interval of the whole time
    return replace(timing, time=new_st, samples_per_s=timing.samples_per_s * scale, interval=iv,
                   throughput={"value": timing.throughput["value"] * scale, "unit": timing.throughput["unit"]})


def _with_transfer(timing: Timing, placement: PipelinePlacement, gpu: GPU) -> tuple[Timing, float]:
    """The generation's time with the offloaded weights' copies (group offloading hides them behind the
    denoiser's compute where they fit under it)."""
    from gpuplan.memory.pipeline_offload import transfer_time_s

    copy_s = transfer_time_s(placement.transfer_bytes, gpu.pcie_gb_per_s_per_direction)
    st = timing.time
    added = max(0.0, copy_s - st.by_phase_s.get("denoise", 0.0)) if placement.overlapped else copy_s
    return _with_added(timing, added), added


def _pipeline_weight_quant(name: str, work: Workload, weight_quant: str) -> tuple[Workload, Any]:
    """A pipeline's ``--weight-quant`` applies to its quantized components in the trace, not to the whole step."""
    if weight_quant == "none":
        return work, weight_quant
    if weight_quant not in ("int8", "fp8", "fp8-storage"):
        raise ConfigError(f"--weight-quant {weight_quant}: {name} is a diffusion pipeline, whose components take "
                          "--weight-quant int8 or fp8 (torchao weight-only) or fp8-storage (diffusers layerwise "
                          "casting), --load-in-4bit / --load-in-8bit, or --gguf-type")
    if work.trains:
        raise ConfigError(f"--weight-quant {weight_quant} applies to --mode infer; for training use --load-in-4bit "
                          "with --peft lora (QLoRA)")
    return work.with_(component_quant=weight_quant), "none"


def _check_calibration(calibration: Calibration | None, gpu: GPU | None) -> Calibration | None:
    """A calibration for another GPU is a usage error; without a GPU there is nothing to calibrate."""
    if calibration is None or gpu is None:
        return None
    if calibration.gpu != gpu.id:
        raise ConfigError(f"the calibration is for {calibration.gpu}, not {gpu.id}; pass the entry for {gpu.id} "
                          "(gpuplan.measure.calibration.calibration_for) or none")
    return calibration


class _CallableModule(types.ModuleType):
    """``gpuplan.estimate`` is both this module and the function: ``gpuplan.estimate("gpt2", ...)``
    works however the module was imported (importing a submodule rebinds the package attribute)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Estimate:
        return estimate(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
