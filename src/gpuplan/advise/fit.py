"""``fit``: the largest batch that fits a GPU, and the cheapest memory techniques for a target batch.

Search from the trace's scaling, not by re-tracing per candidate: for a fixed model and technique
set, the memory a step needs is affine in the batch size (activations, KV cache and temporaries grow
with it; parameters, gradients and optimizer state do not), so two traces give the line and the
answer is read off it. The answer is then confirmed by the tool's own trace: the reported batch
fits and batch + 1 does not (a miss moves along the secant through the traced points).

Techniques, cheapest in speed first (each step keeps the previous ones):

1. mixed precision (AMP bf16, or fp16 where the GPU has no bf16): halves activations, usually faster;
2. 8-bit AdamW (bitsandbytes): optimizer state 8 → ~2 bytes per parameter, same speed;
3. selective activation checkpointing: keeps matmul/attention outputs, recomputes elementwise ops;
4. full activation checkpointing: keeps block inputs only, recomputes each block's forward (~+33%);
5. gradient accumulation at the same effective batch: micro-batch target/k, k micro-steps per step;
6. CPU offload of the optimizer (DeepSpeed ZeRO-Offload style): modelled as removing the optimizer
   state and its step from GPU memory; time adds gradients to the host and parameters back over
   PCIe and the CPU Adam update.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuplan.errors import ConfigError
from gpuplan.workload import MAX_BATCH_SIZE, Workload

if TYPE_CHECKING:
    from gpuplan.estimate import Estimate
    from gpuplan.hardware import GPU
    from gpuplan.models.sources import ModelSource

# CPU offload model (priors, printed with the result): PCIe transfers at 80% of the link's
# per-direction rate; the CPU Adam update streams ~16 bytes per parameter (fp32 param, grad, two
# moments, read and written) at 40 GB/s of host memory bandwidth (a dual-channel-per-socket DDR
# server sustains 40-100 GB/s; DeepSpeed's CPU Adam is bandwidth-bound).
PCIE_EFFICIENCY = 0.8
CPU_ADAM_BYTES_PER_PARAM = 32
CPU_MEMORY_BANDWIDTH_BYTES_PER_S = 40e9
MAX_SEARCH_TRACES = 12


@dataclass(frozen=True, slots=True)
class Point:
    """One traced configuration: what it needs and how long its step takes."""

    workload: Workload
    total_required_bytes: int
    peak_allocated_bytes: int
    fits: bool
    step_time_s: float | None
    throughput: dict[str, Any] | None
    tensor_peak_bytes: int = 0
    """Exact live-tensor peak (before allocator rounding)."""
    min_required_bytes: int = 0
    """What estimate() decides the fit on: the least the step needs (the caching allocator releases
    cached blocks under pressure); 0 when unknown, then ``total_required_bytes`` is used."""

    @property
    def need_bytes(self) -> int:
        return self.min_required_bytes or self.total_required_bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch_size": self.workload.batch_size,
            "grad_accum": self.workload.grad_accum,
            "precision": self.workload.precision,
            "optimizer": self.workload.optimizer,
            "checkpointing": self.workload.checkpointing,
            "total_required_bytes": self.total_required_bytes,
            "min_required_bytes": self.need_bytes,
            "peak_allocated_bytes": self.peak_allocated_bytes,
            "fits": self.fits,
            "step_time_s": self.step_time_s,
            "throughput": self.throughput,
        }


@dataclass(frozen=True, slots=True)
class TechniqueStep:
    """One rung of the technique ladder, at the target batch."""

    name: str
    description: str
    point: Point
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "technique": self.name,
            "description": self.description,
            **self.point.to_dict(),
            "notes": list(self.notes),
        }


@dataclass(frozen=True, slots=True)
class FitResult:
    model: str
    gpu: GPU
    workload: Workload
    max_batch_size: int
    """Largest batch of ``workload`` (as given, no techniques) that fits; 0 when batch 1 does not."""
    max_point: Point | None
    """The confirming trace at ``max_batch_size``."""
    over_point: Point | None
    """The confirming trace at ``max_batch_size + 1`` (does not fit)."""
    bytes_per_sample: int
    """Slope of the affine memory model (bytes per extra sample)."""
    target_batch_size: int | None
    techniques: tuple[TechniqueStep, ...]
    """The ladder tried for the target batch, in order; the last one fits when ``target_fits``."""
    target_fits: bool | None
    traces: int
    assumptions: tuple[str, ...] = ()
    largest_gpu: str | None = None
    needed_bytes: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def peak_allocated_bytes(self) -> int | None:
        if self.target_batch_size is not None and self.techniques:
            return self.techniques[-1].point.peak_allocated_bytes
        return self.max_point.peak_allocated_bytes if self.max_point else None

    @property
    def ok(self) -> bool:
        if self.target_batch_size is not None:
            return bool(self.target_fits)
        return self.max_batch_size >= 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "gpu": self.gpu.id,
            "gpu_usable_memory_bytes": self.gpu.usable_memory_bytes,
            "workload": self.workload.to_dict(),
            "max_batch_size": self.max_batch_size,
            "peak_allocated_bytes": self.peak_allocated_bytes,
            "max_batch": self.max_point.to_dict() if self.max_point else None,
            "max_batch_plus_one": self.over_point.to_dict() if self.over_point else None,
            "bytes_per_sample": self.bytes_per_sample,
            "target_batch_size": self.target_batch_size,
            "target_fits": self.target_fits,
            "techniques": [t.to_dict() for t in self.techniques],
            "traces": self.traces,
            "largest_gpu": self.largest_gpu,
            "needed_bytes": self.needed_bytes,
            "assumptions": list(self.assumptions),
        }

    def __str__(self) -> str:
        from gpuplan.advise.render import render_fit

        return render_fit(self)


def _min_required(est: Estimate) -> int:
    return int(getattr(est, "min_required_bytes", 0) or 0)


class _Tracer:
    """Runs estimate() for workloads of one model on one GPU, counting traces."""

    def __init__(self, source: ModelSource, gpu: GPU) -> None:
        self.source = source
        self.gpu = gpu
        self.traces = 0
        self.assumptions: tuple[str, ...] = ()

    def point(self, workload: Workload) -> Point:
        from gpuplan.estimate import estimate

        self.traces += 1
        est: Estimate = estimate(self.source, workload=workload, gpu=self.gpu)
        if not self.assumptions:
            self.assumptions = est.assumptions
        return Point(
            workload,
            est.total_required_bytes,
            est.peak_allocated_bytes,
            bool(est.fits),
            est.step_time_s,
            est.throughput,
            est.tensor_peak_bytes,
            _min_required(est),
        )


def _largest_batch(
    tracer: _Tracer, base: Workload, first: Point | None = None
) -> tuple[int, Point | None, Point | None, int]:
    """(largest fitting batch, its point, the point at +1, bytes per sample) for ``base``'s config.

    The slope comes from the exact tensor peaks at batch 1 and 2 (allocator rounding makes the
    reserved totals step-like at small batches); each guess is anchored on the nearest traced
    point and kept inside the bracket of known fitting / failing batches (bisection as fallback).
    """
    usable = tracer.gpu.usable_memory_bytes
    p1 = first or tracer.point(base.with_(batch_size=1))
    if not p1.fits:
        return 0, None, p1, 0
    p2 = tracer.point(base.with_(batch_size=2))
    slope = max(p2.tensor_peak_bytes - p1.tensor_peak_bytes, p2.need_bytes - p1.need_bytes, 1)
    known: dict[int, Point] = {1: p1, 2: p2}

    def bracket() -> tuple[int, int | None]:
        lo = max(b for b, p in known.items() if p.fits)
        misses = [b for b, p in known.items() if not p.fits and b > lo]
        return lo, (min(misses) if misses else None)

    def secant(lo: int, hi: int | None) -> int:
        """Batch where the line through two traced points reaches the usable memory."""
        a, b = known[lo], known[hi] if hi is not None else p1
        if b is a:
            b = p1
        db = b.workload.batch_size - a.workload.batch_size
        s = (b.need_bytes - a.need_bytes) / db if db else 0.0
        if s <= 0:
            s = float(slope)
        return lo + int((usable - a.need_bytes) // s)

    guess = 2 + int((usable - p2.need_bytes) // slope)
    last_fit: bool | None = None
    same_side = 0
    for _ in range(MAX_SEARCH_TRACES):
        lo, hi = bracket()
        if hi == lo + 1:
            return lo, known[lo], known[hi], slope
        if lo >= MAX_BATCH_SIZE:
            return lo, known[lo], None, slope
        top = (hi - 1) if hi is not None else MAX_BATCH_SIZE
        g = min(max(guess, lo + 1), top)
        if hi is not None and (g in known or same_side >= 3):
            # bisect when the secant stalls: three traces in a row on the same side of the boundary
            # (allocator segments make the totals piecewise constant near it)
            g, same_side = (lo + hi) // 2, 0
        pt = known[g] = tracer.point(base.with_(batch_size=g))
        check = pt.fits and g == lo + 1  # the "+1" check after a fit is not a stall
        same_side = same_side + 1 if pt.fits is last_fit and not check else 1
        last_fit = pt.fits
        lo, hi = bracket()
        guess = secant(lo, hi)
        if guess <= lo:
            guess = lo + 1
    lo, hi = bracket()
    return lo, known[lo], known.get(lo + 1), slope


def _amp_precision(gpu: GPU) -> str:
    return "amp-bf16" if gpu.has_bf16 else "amp-fp16"


def _ladder(base: Workload, gpu: GPU) -> list[tuple[str, str, dict[str, Any]]]:
    """(name, description, workload changes) for each technique that applies, cheapest first."""
    rungs: list[tuple[str, str, dict[str, Any]]] = []
    if base.precision in ("fp32", "tf32"):
        amp = _amp_precision(gpu)
        rungs.append(("mixed-precision", f"--precision {amp}: autocast matmuls to half precision", {"precision": amp}))
    if base.trains and base.optimizer in ("adamw", "adam"):
        rungs.append(
            (
                "8bit-optimizer",
                "--optimizer adamw-8bit (bitsandbytes): 8-bit optimizer state",
                {"optimizer": "adamw-8bit"},
            )
        )
    if base.trains and base.checkpointing == "none":
        rungs.append(
            (
                "selective-checkpointing",
                "--checkpointing selective: recompute elementwise ops only",
                {"checkpointing": "selective"},
            )
        )
    if base.trains and base.checkpointing != "full":
        rungs.append(
            (
                "full-checkpointing",
                "--checkpointing full: recompute each block's forward in backward",
                {"checkpointing": "full"},
            )
        )
    return rungs


def fit(
    model: str | ModelSource,
    gpu: str | GPU,
    workload: Workload | None = None,
    *,
    target_batch_size: int | None = None,
) -> FitResult:
    """The largest batch of ``workload`` that fits ``gpu``; with ``target_batch_size``, the cheapest
    technique ladder that makes that batch fit (see the module docstring)."""
    from gpuplan.hardware import GPU as GPUType
    from gpuplan.hardware import get_gpu
    from gpuplan.models.sources import ModelSource as SourceType
    from gpuplan.models.sources import resolve_model

    source = model if isinstance(model, SourceType) else resolve_model(model)
    target_gpu = gpu if isinstance(gpu, GPUType) else get_gpu(str(gpu))
    base = workload or Workload()
    if target_batch_size is not None:
        if target_batch_size < 1 or target_batch_size > MAX_BATCH_SIZE:
            raise ConfigError(f"--target-batch-size {target_batch_size} is out of range: allowed 1..{MAX_BATCH_SIZE}")
    tracer = _Tracer(source, target_gpu)
    best, max_pt, over_pt, slope = _largest_batch(tracer, base.with_(grad_accum=1))
    techniques: list[TechniqueStep] = []
    target_fits: bool | None = None
    target = target_batch_size if target_batch_size is not None else (1 if best == 0 else None)
    if target is not None:
        techniques, target_fits = _make_target_fit(tracer, base, target, best, max_pt, over_pt)
    largest = needed = None
    if not (target_fits if target is not None else best >= 1):
        largest, needed = _largest_gpu_and_need(techniques, over_pt)
    notes = list(tracer.assumptions)
    notes.insert(
        0,
        "memory affine in batch size (two traces), answer confirmed by tracing the reported batch and batch + 1",
    )
    if any(t.name == "cpu-offload" for t in techniques):
        notes.append(
            f"CPU offload: optimizer state and step moved to the host; PCIe at {PCIE_EFFICIENCY:.0%} of the "
            f"link, CPU Adam at {CPU_MEMORY_BANDWIDTH_BYTES_PER_S / 1e9:.0f} GB/s host memory bandwidth"
        )
    return FitResult(
        model=source.name,
        gpu=target_gpu,
        workload=base,
        max_batch_size=best,
        max_point=max_pt,
        over_point=over_pt,
        bytes_per_sample=int(slope),
        target_batch_size=target_batch_size,
        techniques=tuple(techniques),
        target_fits=target_fits,
        traces=tracer.traces,
        assumptions=tuple(notes),
        largest_gpu=largest,
        needed_bytes=needed,
    )


def _make_target_fit(
    tracer: _Tracer,
    base: Workload,
    target: int,
    best: int,
    max_pt: Point | None,
    over_pt: Point | None = None,
) -> tuple[list[TechniqueStep], bool]:
    steps: list[TechniqueStep] = []
    current = base.with_(batch_size=target)
    if target <= best and base.grad_accum == 1:
        pt = max_pt if max_pt is not None and max_pt.workload.batch_size == target else tracer.point(current)
        return [TechniqueStep("as-given", "the workload as given", pt)], pt.fits
    traced = [p for p in (max_pt, over_pt) if p is not None and p.workload == current]
    pt = traced[0] if traced else tracer.point(current)  # the search may have traced it already
    steps.append(TechniqueStep("as-given", "the workload as given", pt))
    if pt.fits:
        return steps, True
    for name, text, changes in _ladder(base, tracer.gpu):
        current = current.with_(**changes)
        pt = tracer.point(current)
        steps.append(TechniqueStep(name, text, pt))
        if pt.fits:
            return steps, True
    if current.trains:
        ga = _grad_accum_step(tracer, current, target)
        if ga is not None:
            steps.append(ga)
            if ga.point.fits:
                relaxed = _relax_checkpointing(tracer, ga)
                if relaxed is not None:
                    steps.append(relaxed)
                return steps, True
            current = ga.point.workload
        off = _offload_step(tracer, current)
        if off is not None:
            steps.append(off)
            if off.point.fits:
                return steps, True
    return steps, False


def _grad_accum_step(tracer: _Tracer, current: Workload, target: int) -> TechniqueStep | None:
    """Smallest k dividing the target whose micro-batch target/k fits (affine search, then confirmed)."""
    if target < 2:
        return None
    best, _, _, _ = _largest_batch(tracer, current.with_(grad_accum=1))
    divisors = [k for k in range(2, target + 1) if target % k == 0]
    if best < 1:
        k = target
    else:
        k = next((d for d in divisors if target // d <= best), target)
    micro = current.with_(batch_size=target // k, grad_accum=k)
    return TechniqueStep(
        "grad-accumulation",
        f"--batch-size {target // k} --grad-accum {k}: effective batch {target} in {k} micro-batches",
        _ga_point(tracer, micro),
        notes=("traced with 2 micro-batches (same steady-state memory), time scaled to k",) if k > 2 else (),
    )


def _ga_point(tracer: _Tracer, micro: Workload) -> Point:
    """A grad-accumulation workload's memory and time. Memory in steady state is the same for any
    k >= 2 (the accumulated gradients persist between micro-batches, nothing else grows), and a
    trace runs every micro-batch: trace k = 2 and scale the forward/backward time to k."""
    from gpuplan.estimate import estimate

    k = micro.grad_accum
    tracer.traces += 1
    est = estimate(tracer.source, workload=micro.with_(grad_accum=min(k, 2)), gpu=tracer.gpu)
    time_s = throughput = None
    timing = est.extra.get("json", {}).get("time", {})
    if est.step_time_s is not None and timing:
        phases = timing["by_phase_s"]
        traced_k = min(k, 2)
        micro_s = sum(v for ph, v in phases.items() if ph in ("forward", "loss", "backward")) / traced_k
        time_s = est.step_time_s + (k - traced_k) * micro_s
        if est.throughput:
            per_sample = est.throughput["value"] * est.step_time_s / traced_k  # samples or tokens per micro
            throughput = {"value": per_sample * k / time_s, "unit": est.throughput["unit"]}
    return Point(
        micro,
        est.total_required_bytes,
        est.peak_allocated_bytes,
        bool(est.fits),
        time_s,
        throughput,
        est.tensor_peak_bytes,
        _min_required(est),
    )


def _relax_checkpointing(tracer: _Tracer, ga: TechniqueStep) -> TechniqueStep | None:
    """With gradient accumulation in place, checkpointing added earlier on the ladder may no longer
    be needed: try the cheaper settings at the same micro-batch (one trace each, fastest that fits)."""
    micro = ga.point.workload
    order = {"full": ("selective", "none"), "selective": ("none",)}.get(micro.checkpointing, ())
    best: TechniqueStep | None = None
    for mode in order:
        pt = _ga_point(tracer, micro.with_(checkpointing=mode))
        if not pt.fits:
            break
        if pt.step_time_s is not None and ga.point.step_time_s is not None and pt.step_time_s < ga.point.step_time_s:
            best = TechniqueStep(
                "relax-checkpointing", f"with --grad-accum {micro.grad_accum}, --checkpointing {mode} is enough", pt
            )
    return best


def _offload_step(tracer: _Tracer, current: Workload) -> TechniqueStep | None:
    if current.optimizer == "none":
        return None
    from gpuplan.estimate import estimate

    tracer.traces += 1
    est = estimate(tracer.source, workload=current.with_(optimizer="none"), gpu=tracer.gpu)
    gpu = tracer.gpu
    pcie = (gpu.pcie_gb_per_s_per_direction or 16.0) * 1e9 * PCIE_EFFICIENCY
    param_bytes = est.step.param_bytes
    params = est.step.params_count
    transfer_s = 2 * param_bytes / pcie  # gradients to the host, updated parameters back
    cpu_s = params * CPU_ADAM_BYTES_PER_PARAM / CPU_MEMORY_BANDWIDTH_BYTES_PER_S
    time_s = (est.step_time_s or 0.0) + transfer_s + cpu_s
    tp = None
    if est.throughput and est.step_time_s:
        tp = {"value": est.throughput["value"] * est.step_time_s / time_s, "unit": est.throughput["unit"]}
    pt = Point(
        current,
        est.total_required_bytes,
        est.peak_allocated_bytes,
        bool(est.fits),
        time_s,
        tp,
        est.tensor_peak_bytes,
        _min_required(est),
    )
    return TechniqueStep(
        "cpu-offload",
        "optimizer state and step offloaded to the CPU (DeepSpeed ZeRO-Offload style)",
        pt,
        notes=(f"PCIe {transfer_s:.3g} s + CPU Adam {cpu_s:.3g} s per step added",),
    )


def _largest_gpu_and_need(techniques: list[TechniqueStep], over_pt: Point | None) -> tuple[str, int]:
    from gpuplan.hardware import all_gpus

    largest = max(all_gpus(), key=lambda g: g.usable_memory_bytes)
    pts = [t.point for t in techniques] or ([over_pt] if over_pt else [])
    need = min((p.need_bytes for p in pts), default=0)
    return largest.id, need
