"""``fit``: the largest batch that fits a GPU, and the cheapest memory techniques for a target batch.

Search from the trace's scaling, not by re-tracing per candidate: for a fixed model and technique
set, the memory a step needs is close to affine in the batch size (activations, KV cache and
temporaries grow with it; parameters, gradients and optimizer state do not), so two traces give
the line and the answer is read off it. The answer is then confirmed by the tool's own trace: the
reported batch fits and batch + 1 does not (a miss moves along the secant through the traced
points). Whether a traced step fits is ``estimate``'s verdict, which is memory/on_gpu.py's fit
rule (``min_required_bytes`` against the GPU's usable memory): fit has no arithmetic of its own.

Techniques for a target (effective) batch, cheapest in speed first (each step keeps the previous ones):

1. mixed precision (AMP bf16, or fp16 where the GPU has no bf16): halves activations, usually faster;
2. 8-bit AdamW (bitsandbytes): optimizer state 8 → ~2 bytes per parameter, same speed;
3. selective activation checkpointing: keeps matmul/attention outputs, recomputes elementwise ops;
4. full activation checkpointing: keeps block inputs only, recomputes each block's forward (~+33%);
5. gradient accumulation: the largest micro-batch m that fits *with accumulation* (the accumulated
   gradients stay alive through every later forward, so m is searched at k = 2, whose steady-state
   memory is that of any k ≥ 2), then the smallest k with m·k ≥ target, and the micro-batch
   ceil(target / k) — exactly target when k divides it, at no extra cost. With ``exact_batch`` the
   smallest k ≥ that which divides the target, so that micro-batch × k = target exactly;
6. CPU offload of the optimizer (DeepSpeed ZeRO-Offload style): the step traced without optimizer
   state on the GPU, time from memory/offload.py (the planner's DeepSpeed offload uses the same).

Every search is a bounded number of traces (at most ``MAX_SEARCH_TRACES`` + 2 each), so the number
of traces does not depend on the target: ``--target-batch-size 1000000`` costs what 1000 does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import isqrt
from typing import TYPE_CHECKING, Any

from gpuplan.errors import ConfigError
from gpuplan.hardware.support import check_workload_on_gpu
from gpuplan.memory.offload import describe_model, optimizer_offload_time
from gpuplan.presentation import to_text
from gpuplan.units import format_bytes
from gpuplan.workload import MAX_BATCH_SIZE, MAX_GRAD_ACCUM, MAX_SEQ_LEN, Workload

if TYPE_CHECKING:
    from collections.abc import Callable

    from gpuplan.estimate import Calibration, Estimate
    from gpuplan.hardware import GPU
    from gpuplan.models.sources import ModelSource
    from gpuplan.perf.summary import Throughput
    from gpuplan.perf.workload_family import TimeInterval

MAX_SEARCH_TRACES = 12
"""Traces one largest-batch search may spend after its two scaling traces."""
MAX_TRACES = 3 * (MAX_SEARCH_TRACES + 4) + 14
"""Most traces one ``fit`` runs, whatever the target: three searches (as given, with accumulation,
offloaded; each 2 scaling traces, MAX_SEARCH_TRACES guesses, 2 timing traces for the confirmations),
the as-given and 4 ladder rungs, 2 for the accumulation rung, 4 for relaxing checkpointing, 3 for
the offload rung."""
TRACED_ACCUMULATION = 2
"""Accumulation steps traced for any k ≥ 2: the steady state (gradients accumulated and alive
through the next forward) is reached at the second micro-batch and does not grow after it."""


@dataclass(frozen=True, slots=True)
class Point:
    """One traced configuration: what it needs and how long its step takes."""

    workload: Workload
    total_required_bytes: int
    peak_allocated_bytes: int
    fits: bool
    """``estimate``'s verdict (memory/on_gpu.py's fit rule on ``min_required_bytes``)."""
    step_time_s: float | None
    throughput: Throughput | None
    tensor_peak_bytes: int = 0
    """Exact live-tensor peak (before allocator rounding)."""
    min_required_bytes: int = 0
    """What the fit is decided on: the least the step needs (the caching allocator releases
    cached blocks under pressure)."""
    interval: TimeInterval | None = None
    """80% prediction interval of ``step_time_s`` (perf/workload_family.py)."""

    @property
    def need_bytes(self) -> int:
        return self.min_required_bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch_size": self.workload.batch_size,
            "grad_accum": self.workload.grad_accum,
            "effective_batch_size": self.workload.batch_size * self.workload.grad_accum,
            "precision": self.workload.precision,
            "optimizer": self.workload.optimizer,
            "checkpointing": self.workload.checkpointing,
            "total_required_bytes": self.total_required_bytes,
            "min_required_bytes": self.min_required_bytes,
            "peak_allocated_bytes": self.peak_allocated_bytes,
            "fits": self.fits,
            "step_time_s": self.step_time_s,
            "step_time_interval_s": self.interval.to_list() if self.interval is not None else None,
            "throughput": self.throughput,
        }


def _interval_of(est: Estimate, time_s: float | None) -> TimeInterval | None:
    """The 80% interval of ``time_s``, in the estimate's workload family and GPU generation (None
    when the estimate has no timed interval)."""
    timing = getattr(est, "timing", None)  # stand-in estimates in tests carry only the figures fit reads
    iv = timing.interval if timing is not None else None
    return iv.of(time_s) if iv is not None else None


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
    bytes_per_sample: int | None
    """Slope of the affine memory model (bytes per extra sample); None when batch 1 does not fit as given (one
    trace: no slope was measured — it was printed as 0 B, issue 18 item 5)."""
    target_batch_size: int | None
    techniques: tuple[TechniqueStep, ...]
    """The ladder tried for the target batch, in order; the last one fits when ``target_fits``."""
    target_fits: bool | None
    traces: int
    assumptions: tuple[str, ...] = ()
    largest_gpu: str | None = None
    needed_bytes: int | None = None
    exact_batch: bool = False
    """True: gradient accumulation keeps micro-batch × k = target exactly; False: at least target."""
    extra: dict[str, Any] = field(default_factory=dict)
    probes: tuple[Point, ...] = ()
    """Every point traced on the way, in order (the search and the ladder): what --plot draws."""

    @property
    def peak_allocated_bytes(self) -> int | None:
        if self.target_batch_size is not None and self.techniques:
            return self.techniques[-1].point.peak_allocated_bytes
        return self.max_point.peak_allocated_bytes if self.max_point else None

    @property
    def effective_batch_size(self) -> int | None:
        """Samples per optimizer step of the answer for the target (micro-batch × accumulation)."""
        if self.target_batch_size is None or not self.techniques:
            return None
        w = self.techniques[-1].point.workload
        return w.batch_size * w.grad_accum

    @property
    def reason(self) -> str | None:
        """Why the answer is "no", in one line (None when something fits)."""
        if self.ok:
            return None
        batch = self.target_batch_size or 1
        usable = format_bytes(self.gpu.usable_memory_bytes)
        largest = f"; the largest {self.gpu.vendor.split()[0]} GPU in the catalog is {self.largest_gpu}" \
            if self.largest_gpu else ""
        return (
            f"batch {batch} does not fit {self.gpu.id} ({usable} usable) even with every technique: it needs at "
            f"least {format_bytes(self.needed_bytes or 0)}{largest} "
            "— try `gpuplan recommend` or `gpuplan plan` for multi-GPU layouts"
        )

    @property
    def ok(self) -> bool:
        """The answer is yes: the largest batch as given, or — with a target, or batch 1 when nothing fits as
        given — the technique ladder's last rung (CPU offload included) fits."""
        if self.target_batch_size is not None or self.techniques:
            return bool(self.target_fits)
        return self.max_batch_size >= 1

    @property
    def answer(self) -> TechniqueStep | None:
        """The rung that makes the target fit (None: no target, or nothing fits)."""
        return self.techniques[-1] if self.techniques and self.target_fits else None

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
            "exact_batch": self.exact_batch,
            "effective_batch_size": self.effective_batch_size,
            "target_fits": self.target_fits,
            "fits": self.ok,
            "answer": self.answer.to_dict() if self.answer is not None else None,
            "reason": self.reason,
            "techniques": [t.to_dict() for t in self.techniques],
            "traces": self.traces,
            "largest_gpu": self.largest_gpu,
            "needed_bytes": self.needed_bytes,
            "assumptions": list(self.assumptions),
        }

    def __str__(self) -> str:
        return to_text(self)  # gpuplan/report/registry.py: report.advise.render_fit


class _Tracer:
    """Runs estimate() for workloads of one model on one GPU, each workload once, counting traces."""

    def __init__(self, source: ModelSource, gpu: GPU, calibration: Calibration | None = None,
                 progress: Callable[[str], None] | None = None) -> None:
        self.source = source
        self.gpu = gpu
        self.calibration = calibration
        self.traces = 0
        self.progress = progress
        self.probes: list[Point] = []
        self.assumptions: tuple[str, ...] = ()
        self._done: dict[Workload, Estimate] = {}

    def estimate(self, workload: Workload) -> Estimate:
        from gpuplan.estimate import estimate

        est = self._done.get(workload)
        if est is None:
            self.traces += 1
            if self.progress is not None:
                self.progress(f"fit: trace {self.traces}, batch {workload.batch_size} × {workload.grad_accum}, "
                              f"{workload.precision}, checkpointing {workload.checkpointing}")
            est = self._done[workload] = estimate(
                self.source, workload=workload, gpu=self.gpu, calibration=self.calibration
            )
            if not self.assumptions:
                self.assumptions = est.assumptions
        return est

    def point(self, workload: Workload, *, timed: bool = True) -> Point:
        """``workload`` traced; with accumulation k > 2, its memory is that of k = 2 (see
        TRACED_ACCUMULATION) and its time (when ``timed``) :meth:`accumulated_time`."""
        k = workload.grad_accum
        est = self.estimate(_traced(workload))
        time_s, throughput = est.step_time_s, est.throughput
        if k > TRACED_ACCUMULATION:
            time_s, throughput = self.accumulated_time(workload, est) if timed else (None, None)
        pt = Point(
            workload,
            est.total_required_bytes,
            est.peak_allocated_bytes,
            bool(est.fits),
            time_s,
            throughput,
            est.tensor_peak_bytes,
            est.min_required_bytes,
            _interval_of(est, time_s),
        )
        self.probes.append(pt)
        return pt

    def accumulated_time(self, workload: Workload, traced: Estimate) -> tuple[float | None, Throughput | None]:
        """Step time and throughput of ``workload`` (accumulation k) from its k = 2 trace and a
        k = 1 trace of the same micro-batch: one accumulating micro-batch costs T(2) − T(1), so
        T(k) = T(1) + (k − 1)·(T(2) − T(1)). Only ``step_time_s`` and ``throughput`` are read, so a
        calibration scales every term alike."""
        one = self.estimate(workload.with_(grad_accum=1))
        if traced.step_time_s is None or one.step_time_s is None:
            return None, None
        k = workload.grad_accum
        micro_s = traced.step_time_s - one.step_time_s
        time_s = one.step_time_s + (k - 1) * micro_s
        throughput: Throughput | None = None
        if traced.throughput is not None:
            per_micro = traced.throughput["value"] * traced.step_time_s / TRACED_ACCUMULATION
            throughput = {"value": per_micro * k / time_s, "unit": traced.throughput["unit"]}
        return time_s, throughput


@dataclass(frozen=True, slots=True)
class _Search:
    """A largest-value search: the value (batch, or seq-len steps), the confirming points at it and
    at value + 1 step, the slope (bytes per step)."""

    batch: int
    point: Point | None
    over: Point | None
    bytes_per_sample: int


@dataclass(frozen=True, slots=True)
class _Axis:
    """What a search grows: ``field`` of the workload in steps of ``unit`` (n steps = n·unit), up to
    ``limit`` steps."""

    field: str
    unit: int
    limit: int

    def at(self, base: Workload, n: int) -> Workload:
        return base.with_(**{self.field: n * self.unit})

    def steps(self, point: Point) -> int:
        return int(getattr(point.workload, self.field)) // self.unit


BATCH_AXIS = _Axis("batch_size", 1, MAX_BATCH_SIZE)
SEQ_LEN_STEP = 64
"""Resolution of the largest-sequence-length search, in tokens (fine-tuning tables print context
lengths to a few hundred tokens; one token more changes nothing a user would choose)."""


def seq_len_axis(limit_tokens: int = MAX_SEQ_LEN) -> _Axis:
    return _Axis("seq_len", SEQ_LEN_STEP, max(1, limit_tokens // SEQ_LEN_STEP))


def _largest_batch(tracer: _Tracer, base: Workload, axis: _Axis = BATCH_AXIS) -> _Search:
    """The largest batch (or other ``axis`` value) of ``base``'s config that fits, in at most
    MAX_SEARCH_TRACES + 2 traces.

    The slope comes from the exact tensor peaks at 1 and 2 steps (allocator rounding makes the
    reserved totals step-like at small sizes); each guess is anchored on the nearest traced
    point and kept inside the bracket of known fitting / failing values (bisection as fallback).
    """
    usable = tracer.gpu.usable_memory_bytes
    p1 = tracer.point(axis.at(base, 1), timed=False)
    if not p1.fits:
        return _Search(0, None, p1, 0)
    p2 = tracer.point(axis.at(base, 2), timed=False)
    slope = max(p2.tensor_peak_bytes - p1.tensor_peak_bytes, p2.need_bytes - p1.need_bytes, 1)
    known: dict[int, Point] = {1: p1, 2: p2}

    def bracket() -> tuple[int, int | None]:
        lo = max(b for b, p in known.items() if p.fits)
        misses = [b for b, p in known.items() if not p.fits and b > lo]
        return lo, (min(misses) if misses else None)

    def secant(lo: int, hi: int | None) -> int:
        """Value where the line through two traced points reaches the usable memory."""
        a, b = known[lo], known[hi] if hi is not None else p1
        if b is a:
            b = p1
        db = axis.steps(b) - axis.steps(a)
        s = (b.need_bytes - a.need_bytes) / db if db else 0.0
        if s <= 0:
            s = float(slope)
        return lo + int((usable - a.need_bytes) // s)

    def confirmed(lo: int, hi: int | None) -> _Search:
        over = tracer.point(known[hi].workload) if hi is not None else None
        at = tracer.point(known[lo].workload)
        return _Search(lo, at, over, _per_step_bytes(known, lo, hi, slope))

    guess = 2 + int((usable - p2.need_bytes) // slope)
    last_fit: bool | None = None
    same_side = 0
    for _ in range(MAX_SEARCH_TRACES):
        lo, hi = bracket()
        if hi == lo + 1:
            return confirmed(lo, hi)
        if lo >= axis.limit:
            return confirmed(lo, None)
        top = (hi - 1) if hi is not None else axis.limit
        g = min(max(guess, lo + 1), top)
        if hi is not None and (g in known or same_side >= 3):
            # bisect when the secant stalls: three traces in a row on the same side of the boundary
            # (allocator segments make the totals piecewise constant near it)
            g, same_side = (lo + hi) // 2, 0
        pt = known[g] = tracer.point(axis.at(base, g), timed=False)
        check = pt.fits and g == lo + 1  # the "+1" check after a fit is not a stall
        same_side = same_side + 1 if pt.fits is last_fit and not check else 1
        last_fit = pt.fits
        lo, hi = bracket()
        guess = secant(lo, hi)
        if guess <= lo:
            guess = lo + 1
    lo, hi = bracket()
    return confirmed(lo, hi if hi == lo + 1 else None)


def _per_step_bytes(known: dict[int, Point], lo: int, hi: int | None, first_slope: int) -> int:
    """What one more sample (or seq-len step) costs where the answer is: the live tensor bytes between the
    confirming traces at the answer and one step past it, else the slope of the line through the farthest
    apart traced points. Not the first two traces' slope: at batch 1 and 2 the peak can sit in the optimizer
    step, which no sample changes (a DeBERTa-v2-xlarge fit printed ~1 KiB per sample while its own table
    stepped 0.65 GiB from 24 to 25; issue 19)."""
    if hi is not None and hi > lo:
        tensor_step = (known[hi].tensor_peak_bytes - known[lo].tensor_peak_bytes) // (hi - lo)
        if tensor_step > 0:
            return tensor_step
    ends = sorted(known)
    if len(ends) >= 2 and ends[-1] > ends[0]:
        span = (known[ends[-1]].need_bytes - known[ends[0]].need_bytes) // (ends[-1] - ends[0])
        if span > 0:
            return span
    return first_slope


def accumulation_split(
    target: int, max_micro_batch: int, *, min_steps: int = 2, exact: bool = False
) -> tuple[int, int]:
    """(micro-batch, accumulation steps k) for an effective batch of ``target`` when at most
    ``max_micro_batch`` samples fit in one micro-batch.

    k is the smallest with micro·k ≥ target (and k ≥ ``min_steps``); the micro-batch is the smallest
    that reaches the target at that k, ceil(target / k), so it is exactly target whenever k divides
    it, at no cost. ``exact``: the smallest such k that divides target, micro·k = target exactly
    (k = target, micro-batch 1, always qualifies)."""
    if target < 1 or max_micro_batch < 1:
        raise ValueError(f"need target ≥ 1 and a micro-batch ≥ 1, got {target}, {max_micro_batch}")
    k = max(min_steps, -(-target // max_micro_batch))
    if exact:
        k = min((d for d in _divisors(target) if d >= k), default=k)
    return -(-target // k), k


def _divisors(n: int) -> list[int]:
    """Divisors of ``n`` in O(√n) arithmetic."""
    small = [d for d in range(1, isqrt(n) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def _amp_precision(gpu: GPU) -> str:
    return "amp-bf16" if gpu.has_bf16 else "amp-fp16"


def _ladder(base: Workload, gpu: GPU, *, pipeline: bool = False) -> list[tuple[str, str, dict[str, Any]]]:
    """(name, description, workload changes) for each technique that applies, cheapest first; a diffusion
    pipeline's inference adds diffusers' offload modes (advise/pipeline.py)."""
    rungs: list[tuple[str, str, dict[str, Any]]] = []
    if pipeline:
        from gpuplan.advise.pipeline import offload_rungs

        rungs += offload_rungs(base)
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
    if base.trains and base.uses_peft:
        rungs += _peft_rungs(base)
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
    if base.trains and base.peft == "lora" and base.load_in == "none":
        # the frozen base in NF4: ~0.55 bytes per weight instead of 2, dequantized per layer (slower);
        # not for DoRA: QDoRA is not modelled (trace/peft.py)
        rungs.append(("4bit-base", "--peft qlora: frozen base weights in NF4 (bitsandbytes, double quantization)",
                      {"peft": "qlora"}))
    if base.trains and base.uses_peft and base.optimizer in ("adamw", "adam", "adamw-8bit"):
        rungs.append(("paged-optimizer", "--optimizer paged-adamw-8bit: 8-bit state in CUDA unified memory "
                      "(bitsandbytes), evicted to the host under pressure", {"optimizer": "paged-adamw-8bit"}))
    return rungs


PEFT_LADDER_RANK = 8
"""The rank the ladder lowers a larger LoRA rank to (PEFT's default)."""


def _peft_rungs(base: Workload) -> list[tuple[str, str, dict[str, Any]]]:
    """Adapter changes that cost no speed: a smaller rank, PEFT's default targets (fewer adapters)."""
    rungs: list[tuple[str, str, dict[str, Any]]] = []
    if base.lora_rank > PEFT_LADDER_RANK:
        rungs.append(("smaller-rank", f"--lora-rank {PEFT_LADDER_RANK}: smaller adapters and their inputs' "
                      "saved activations", {"lora_rank": PEFT_LADDER_RANK}))
    if base.lora_targets:
        rungs.append(("default-targets", "--lora-targets left to PEFT's default for the architecture (fewer "
                      "adapted layers)", {"lora_targets": ()}))
    return rungs


def fit(
    model: str | ModelSource,
    gpu: str | GPU,
    workload: Workload | None = None,
    *,
    target_batch_size: int | None = None,
    exact_batch: bool = False,
    calibration: Calibration | None = None,
    progress: Callable[[str], None] | None = None,
) -> FitResult:
    """The largest batch of ``workload`` that fits ``gpu``; with ``target_batch_size`` (samples per
    optimizer step), the cheapest technique ladder that makes that batch fit. Gradient accumulation
    reaches at least the target, or exactly it with ``exact_batch`` (see the module docstring).
    ``progress`` is called with a short line before each trace."""
    from gpuplan.hardware import GPU as GPUType
    from gpuplan.hardware import get_gpu
    from gpuplan.models.sources import ModelSource as SourceType
    from gpuplan.models.sources import resolve_model

    if target_batch_size is not None and not 1 <= target_batch_size <= MAX_BATCH_SIZE:
        raise ConfigError(
            f"--target-batch-size {target_batch_size} is out of range: allowed 1..{MAX_BATCH_SIZE} "
            "(samples per optimizer step)"
        )
    source = model if isinstance(model, SourceType) else resolve_model(model)
    target_gpu = gpu if isinstance(gpu, GPUType) else get_gpu(str(gpu))
    from gpuplan.estimate import with_stated_seq_len

    base = with_stated_seq_len(source, workload or Workload())
    if source.kind == "pipeline":
        source.check_workload(base)  # type: ignore[attr-defined]  # a bad size or frame count: one line, no trace
    check_workload_on_gpu(base, target_gpu)  # the same refusal as every verb, before the trace
    tracer = _Tracer(source, target_gpu, calibration, progress)
    search = _largest_batch(tracer, base)
    techniques: list[TechniqueStep] = []
    target_fits: bool | None = None
    notes: list[str] = []
    target = target_batch_size if target_batch_size is not None else (1 if search.batch == 0 else None)
    if target is not None:
        techniques, target_fits, notes = _make_target_fit(tracer, base, target, search, exact_batch)
    largest = needed = None
    if not (target_fits if target is not None else search.batch >= 1):
        largest, needed = _largest_gpu_and_need(techniques, search.over, target_gpu)
    assumptions = [
        "memory affine in batch size (two traces), answer confirmed by tracing the reported batch and batch + 1",
        *tracer.assumptions,
        *notes,
    ]
    if any(t.name == "cpu-offload" for t in techniques):
        assumptions.append(describe_model())
    return FitResult(
        model=source.name,
        gpu=target_gpu,
        workload=base,
        max_batch_size=search.batch,
        max_point=search.point,
        over_point=search.over,
        bytes_per_sample=int(search.bytes_per_sample) if search.batch else None,
        target_batch_size=target_batch_size,
        techniques=tuple(techniques),
        target_fits=target_fits,
        traces=tracer.traces,
        assumptions=tuple(assumptions),
        largest_gpu=largest,
        needed_bytes=needed,
        exact_batch=exact_batch,
        probes=tuple(tracer.probes),
    )


def _make_target_fit(
    tracer: _Tracer, base: Workload, target: int, search: _Search, exact: bool
) -> tuple[list[TechniqueStep], bool, list[str]]:
    """The ladder for an effective batch of ``target``: (rungs tried, whether the last fits, notes)."""
    k0 = base.grad_accum
    micro = -(-target // k0)  # the user's own accumulation, if any, is kept
    current = base.with_(batch_size=micro)
    if search.point is not None and current == search.point.workload:
        pt = search.point
    elif search.over is not None and current == search.over.workload:
        pt = search.over
    else:
        pt = tracer.point(current)
    steps = [TechniqueStep("as-given", "the workload as given", pt)]
    if pt.fits:
        return steps, True, []
    pipeline = tracer.source.kind == "pipeline"
    notes: list[str] = []
    state_bytes = tracer.estimate(_traced(current)).step.model_state_bytes  # traced already
    for name, text, changes in _ladder(base, tracer.gpu, pipeline=pipeline):
        current = current.with_(**changes)
        if set(changes) == {"checkpointing"} and state_bytes > tracer.gpu.usable_memory_bytes:
            # checkpointing frees activations only: parameters, gradients and optimizer state all live at the
            # optimizer step, whatever is recomputed (a MIG slice traced every rung of a model this big)
            notes.append(f"{name} not traced: the model state alone ({format_bytes(state_bytes)}: parameters, "
                         f"gradients, optimizer state) exceeds the {format_bytes(tracer.gpu.usable_memory_bytes)} "
                         "usable, and checkpointing frees activations only; the later rungs include it")
            continue
        pt = tracer.point(current)
        state_bytes = tracer.estimate(_traced(current)).step.model_state_bytes
        steps.append(TechniqueStep(name, text, pt))
        if pt.fits:
            return steps, True, notes
    if current.trains and pipeline:
        notes.append("gradient accumulation and optimizer offload are not modelled for diffusion pipelines")
    elif current.trains:
        ga = _accumulate(tracer, current, target, exact, notes)
        if ga is not None:
            steps.append(ga)
            if ga.point.fits:
                relaxed = _relax_checkpointing(tracer, ga)
                if relaxed is not None:
                    steps.append(relaxed)
                return steps, True, notes
            current = ga.point.workload
        off = _offload_step(tracer, current, target, exact, notes)
        if off is not None:
            steps.append(off)
            return steps, off.point.fits, notes
    return steps, False, notes


def _split_for(
    tracer: _Tracer, config: Workload, target: int, exact: bool, notes: list[str]
) -> tuple[Workload, _Search] | None:
    """``config`` at the largest micro-batch that fits with accumulation and the accumulation that
    reaches ``target``; None (with a note) when no accumulation can."""
    min_steps = max(2, config.grad_accum)
    search = _largest_batch(tracer, config.with_(batch_size=1, grad_accum=TRACED_ACCUMULATION))
    if search.batch < 1:
        notes.append(f"gradient accumulation cannot help: micro-batch 1 with accumulation does not fit {tracer.gpu.id}")
        return None
    micro, k = accumulation_split(target, search.batch, min_steps=min_steps, exact=exact)
    if k > MAX_GRAD_ACCUM:
        notes.append(
            f"gradient accumulation would need {k} micro-batches of at most {search.batch} samples (allowed up to "
            f"{MAX_GRAD_ACCUM}); lower --target-batch-size or use more GPUs (`gpuplan plan`)"
        )
        return None
    notes.append(
        f"gradient accumulation: largest micro-batch with accumulation {search.batch}; "
        + (
            f"micro-batch {micro} × {k} = {micro * k}, exactly the target (smallest k dividing it)"
            if exact
            else f"micro-batch {micro} × {k} = {micro * k} "
            + (
                "= the target"
                if micro * k == target
                else f"≥ target {target} (smallest k); --exact-batch for exactly {target}"
            )
        )
    )
    return config.with_(batch_size=micro, grad_accum=k), search


def _traced(workload: Workload) -> Workload:
    """The workload :meth:`_Tracer.point` traces for ``workload`` (accumulation capped, module docstring)."""
    return workload.with_(grad_accum=min(workload.grad_accum, TRACED_ACCUMULATION))


def _accumulate(tracer: _Tracer, current: Workload, target: int, exact: bool, notes: list[str]) -> TechniqueStep | None:
    """The gradient-accumulation rung (module docstring, 5)."""
    if target < 2:
        return None
    split = _split_for(tracer, current, target, exact, notes)
    if split is None:
        return None
    micro, _ = split
    return TechniqueStep(
        "grad-accumulation",
        f"--batch-size {micro.batch_size} --grad-accum {micro.grad_accum}: effective batch "
        f"{micro.batch_size * micro.grad_accum} in {micro.grad_accum} micro-batches",
        tracer.point(micro),
        notes=(
            f"memory traced with {TRACED_ACCUMULATION} micro-batches (same steady state), time for {micro.grad_accum}",
        )
        if micro.grad_accum > TRACED_ACCUMULATION
        else (),
    )


def _relax_checkpointing(tracer: _Tracer, ga: TechniqueStep) -> TechniqueStep | None:
    """With gradient accumulation in place, checkpointing added earlier on the ladder may no longer
    be needed: try the cheaper settings at the same micro-batch (fastest that fits)."""
    micro = ga.point.workload
    order = {"full": ("selective", "none"), "selective": ("none",)}.get(micro.checkpointing, ())
    best: TechniqueStep | None = None
    for mode in order:
        pt = tracer.point(micro.with_(checkpointing=mode))
        if not pt.fits:
            break
        if pt.step_time_s is not None and ga.point.step_time_s is not None and pt.step_time_s < ga.point.step_time_s:
            best = TechniqueStep(
                "relax-checkpointing", f"with --grad-accum {micro.grad_accum}, --checkpointing {mode} is enough", pt
            )
    return best


def _offload_step(
    tracer: _Tracer, current: Workload, target: int, exact: bool, notes: list[str]
) -> TechniqueStep | None:
    """The CPU-offload rung: the step without optimizer state on the GPU (traced with no optimizer),
    at ``current``'s micro-batch, else at the largest micro-batch that fits with accumulation."""
    if current.optimizer == "none":
        return None
    bare = current.with_(optimizer="none")
    if not tracer.point(bare, timed=False).fits and current.trains and target >= 2:
        split = _split_for(tracer, bare, target, exact, notes)
        if split is not None:
            bare = split[0]
    pt = tracer.point(bare)
    step = tracer.estimate(_traced(bare)).step
    per_param = step.param_bytes / step.params_count if step.params_count else 0.0
    # torch keeps each gradient in its parameter's dtype: as many bytes go down as come back
    offload = optimizer_offload_time(
        step.params_count,
        grad_bytes_per_param=per_param,
        param_bytes_per_param=per_param,
        host_link_gb_per_s=tracer.gpu.pcie_gb_per_s_per_direction,
    )
    time_s: float | None = None
    throughput: Throughput | None = None
    if pt.step_time_s is not None:
        time_s = pt.step_time_s + offload.total_s
        if pt.throughput is not None:
            throughput = {"value": pt.throughput["value"] * pt.step_time_s / time_s, "unit": pt.throughput["unit"]}
    workload = bare.with_(optimizer=current.optimizer)
    return TechniqueStep(
        "cpu-offload",
        "optimizer state and step offloaded to the CPU (DeepSpeed ZeRO-Offload style)",
        Point(
            workload,
            pt.total_required_bytes,
            pt.peak_allocated_bytes,
            pt.fits,
            time_s,
            throughput,
            pt.tensor_peak_bytes,
            pt.min_required_bytes,
            pt.interval.of(time_s) if pt.interval is not None else None,
        ),
        notes=(offload.describe() + " added",),
    )


def _largest_gpu_and_need(techniques: list[TechniqueStep], over_pt: Point | None, gpu: GPU) -> tuple[str, int]:
    """The largest whole GPU of the user's vendor (a CUDA user on a MIG slice is sent to a CUDA GPU, not an
    Apple SoC's unified memory) and the least any traced rung needed."""
    from gpuplan.hardware import all_gpus

    same = [g for g in all_gpus() if not g.is_mig and g.vendor_key == gpu.vendor_key] or all_gpus()
    largest = max(same, key=lambda g: g.usable_memory_bytes)
    pts = [t.point for t in techniques] or ([over_pt] if over_pt else [])
    need = min((p.need_bytes for p in pts), default=0)
    return largest.id, need


@dataclass(frozen=True, slots=True)
class SeqLenFit:
    """The largest sequence length of a workload (its batch kept) that fits a GPU: the frontier the
    fine-tuning tables print (Unsloth, LLaMA-Factory: context length per GPU for a LoRA/QLoRA setup)."""

    model: str
    gpu: GPU
    workload: Workload
    max_seq_len: int
    """Largest multiple of ``SEQ_LEN_STEP`` tokens that fits; 0 when even SEQ_LEN_STEP does not."""
    max_point: Point | None
    over_point: Point | None
    """The confirming trace SEQ_LEN_STEP tokens further (does not fit); None at the search's limit."""
    bytes_per_token: int
    """Slope of the first two traces, per token per sample."""
    traces: int
    limit_tokens: int
    assumptions: tuple[str, ...] = ()
    probes: tuple[Point, ...] = ()
    ladder: tuple[SeqLenRung, ...] = ()
    """The long-context rungs (cumulative) when memory, not the limit, stopped the search as given."""

    @property
    def ok(self) -> bool:
        return self.max_seq_len >= 1

    @property
    def reason(self) -> str | None:
        if self.ok:
            return None
        need = self.over_point.need_bytes if self.over_point is not None else 0
        return (f"{SEQ_LEN_STEP} tokens × batch {self.workload.batch_size} do not fit {self.gpu.id} "
                f"({format_bytes(self.gpu.usable_memory_bytes)} usable; needs {format_bytes(need)}) — try "
                "`gpuplan fit` with --target-batch-size 1 for the techniques that would")

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "gpu": self.gpu.id,
            "gpu_usable_memory_bytes": self.gpu.usable_memory_bytes,
            "axis": "seq-len",
            "workload": self.workload.to_dict(),
            "max_seq_len": self.max_seq_len,
            "seq_len_step": SEQ_LEN_STEP,
            "limit_tokens": self.limit_tokens,
            "max_seq_len_point": _seq_point(self.max_point),
            "max_seq_len_plus_step": _seq_point(self.over_point),
            "bytes_per_token": self.bytes_per_token,
            "reason": self.reason,
            "traces": self.traces,
            "assumptions": list(self.assumptions),
            "ladder": [r.to_dict() for r in self.ladder],
        }

    def __str__(self) -> str:
        return to_text(self)  # gpuplan/report/registry.py: report.advise.render_seq_len_fit


@dataclass(frozen=True, slots=True)
class SeqLenRung:
    """One long-context technique added to the ones before it, and the largest sequence that then fits."""

    name: str
    description: str
    changes: dict[str, Any]
    max_seq_len: int
    max_point: Point | None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "workload_changes": dict(self.changes),
                "max_seq_len": self.max_seq_len, "max_seq_len_point": _seq_point(self.max_point)}


def _long_context_ladder(source: ModelSource, base: Workload) -> list[tuple[str, str, dict[str, Any]]]:
    """The single-GPU long-context recipe (Arctic Long Sequence Training), cheapest in speed first, each
    keeping the ones before: full checkpointing, Liger's fused linear cross entropy (causal LMs), DeepSpeed's
    TiledMLP, activation-checkpoint CPU offload."""
    if not base.trains:
        return []
    rungs: list[tuple[str, str, dict[str, Any]]] = []
    if base.checkpointing != "full":
        rungs.append(("full-checkpointing", "--checkpointing full: keep block inputs only",
                      {"checkpointing": "full"}))
    if base.loss in ("auto", "cross-entropy", "chunked-ce") and getattr(source, "task", None) == "causal-lm":
        rungs.append(("fused-linear-ce", "--loss fused-linear-ce: Liger's fused linear cross entropy, no "
                      "full-vocabulary logits", {"loss": "fused-linear-ce"}))
    if not base.tiled_mlp:
        rungs.append(("tiled-mlp", "--tiled-mlp: each MLP over sequence tiles, recomputed in backward",
                      {"tiled_mlp": True}))
    if base.offload == "none":
        rungs.append(("activation-offload", "--offload activations: checkpointed block inputs on the host",
                      {"offload": "activations"}))
    return rungs


def _seq_point(point: Point | None) -> dict[str, Any] | None:
    return None if point is None else {"seq_len": point.workload.seq_len, **point.to_dict()}


def largest_seq_len(
    model: str | ModelSource,
    gpu: str | GPU,
    workload: Workload | None = None,
    *,
    limit_tokens: int = MAX_SEQ_LEN,
    calibration: Calibration | None = None,
    progress: Callable[[str], None] | None = None,
    ladder: bool = False,
) -> SeqLenFit:
    """The largest ``--seq-len`` (in steps of SEQ_LEN_STEP tokens, at most ``limit_tokens``) of
    ``workload`` — its batch, precision, PEFT setup and techniques as given — that fits ``gpu``.
    ``ladder`` (the CLI's): when memory stops it, the long-context rungs too (:func:`_long_context_ladder`),
    each a search of its own.
    The same search as the largest batch (secant on traced points, confirmed by tracing the answer
    and one step more); memory grows about linearly in the sequence with fused attention, faster
    with eager attention, which the confirming traces catch."""
    from gpuplan.hardware import GPU as GPUType
    from gpuplan.hardware import get_gpu
    from gpuplan.models.sources import ModelSource as SourceType
    from gpuplan.models.sources import resolve_model

    if not SEQ_LEN_STEP <= limit_tokens <= MAX_SEQ_LEN:
        raise ConfigError(f"sequence-length limit {limit_tokens} is out of range: allowed "
                          f"{SEQ_LEN_STEP}..{MAX_SEQ_LEN} tokens")
    source = model if isinstance(model, SourceType) else resolve_model(model)
    from gpuplan.models.base import refuse_pipeline

    refuse_pipeline(source, "fit --axis seq-len", "use --axis batch or --axis resolution")
    target_gpu = gpu if isinstance(gpu, GPUType) else get_gpu(str(gpu))
    base = workload or Workload()
    table = _position_table_tokens(source, base)
    notes: list[str] = []
    if table is not None and table < limit_tokens:
        limit_tokens = table
        notes.append(f"searched up to {table:,} tokens: the model's learned position table holds no more")
    if limit_tokens < SEQ_LEN_STEP:
        raise ConfigError(f"{source.name} runs at most {limit_tokens} tokens, below the search's step of "
                          f"{SEQ_LEN_STEP}; use `gpuplan estimate --seq-len N` instead")
    tracer = _Tracer(source, target_gpu, calibration, progress)
    search = _largest_batch(tracer, base, seq_len_axis(limit_tokens))
    rungs: list[SeqLenRung] = []
    current = base
    if ladder and search.over is not None:  # memory stopped it: the long-context rungs, each searched again
        for name, description, changes in _long_context_ladder(source, base):
            current = current.with_(**changes)
            rung = _largest_batch(tracer, current, seq_len_axis(limit_tokens))
            rungs.append(SeqLenRung(name, description, changes, rung.batch * SEQ_LEN_STEP, rung.point))
            if rung.over is None:  # the search's limit: later rungs cannot add tokens
                break
    assumptions = (f"largest sequence length searched in steps of {SEQ_LEN_STEP} tokens at batch "
                   f"{base.batch_size}: two traces give the slope, the answer is confirmed by tracing it and "
                   f"{SEQ_LEN_STEP} tokens more", *notes, *tracer.assumptions)
    return SeqLenFit(
        model=source.name, gpu=target_gpu, workload=base, max_seq_len=search.batch * SEQ_LEN_STEP,
        max_point=search.point, over_point=search.over,
        bytes_per_token=int(search.bytes_per_sample) // SEQ_LEN_STEP, traces=tracer.traces,
        limit_tokens=limit_tokens, assumptions=assumptions, probes=tuple(tracer.probes), ladder=tuple(rungs))


def _position_table_tokens(source: ModelSource, workload: Workload) -> int | None:
    """The longest sequence a model with a learned position table runs (None: positions are computed,
    as in RoPE models), read from a one-block build on fake tensors (no weight is allocated), kept in the
    trace cache beside the model's traces (a cached search imports no torch)."""
    from gpuplan.models.sources import positions_needed
    from gpuplan.trace.cache import model_fact

    plain = workload.with_(peft="none")
    table = model_fact(source, "position_table", lambda: _position_table_size(source, plain), plain)
    if not isinstance(table, int):
        return None
    return table - (positions_needed(workload, 1) - 1)  # generation feeds new tokens back as positions


def _position_table_size(source: ModelSource, workload: Workload) -> int | None:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from gpuplan.models.sources import learned_position_table
    from gpuplan.trace.cache import layer_counts_of
    from gpuplan.trace.runner import StepRunner, Target, quiet

    one_block = dict.fromkeys(layer_counts_of(source), 1)
    with quiet(), torch.device("cpu"), FakeTensorMode():
        module = StepRunner(source, workload, Target(), fake=True, layers=one_block).build_model()
    table = learned_position_table(module)
    return None if table is None else table[1]


@dataclass(frozen=True, slots=True)
class ResolutionFit:
    """The largest square image (video frame) a diffusion pipeline's workload fits a GPU at, in steps of the
    pipeline's pixel multiple (VAE factor × patch size), its batch, frames and settings kept."""

    model: str
    gpu: GPU
    workload: Workload
    max_image_size: int
    """Largest side in pixels that fits; 0 when even one step does not."""
    step_px: int
    max_point: Point | None
    over_point: Point | None
    """The confirming trace one step larger (does not fit); None at the search's limit."""
    bytes_per_step: int
    traces: int
    limit_px: int
    assumptions: tuple[str, ...] = ()
    probes: tuple[Point, ...] = ()

    @property
    def ok(self) -> bool:
        return self.max_image_size >= 1

    @property
    def reason(self) -> str | None:
        if self.ok:
            return None
        need = self.over_point.need_bytes if self.over_point is not None else 0
        return (f"{self.step_px}×{self.step_px} at batch {self.workload.batch_size} does not fit {self.gpu.id} "
                f"({format_bytes(self.gpu.usable_memory_bytes)} usable; needs {format_bytes(need)}) — try "
                "`gpuplan recommend` for a larger GPU" + (" or --offload" if not self.workload.trains else ""))

    def to_dict(self) -> dict[str, Any]:
        def point(p: Point | None) -> dict[str, Any] | None:
            return None if p is None else {"image_size": p.workload.image_size, **p.to_dict()}

        return {
            "model": self.model, "gpu": self.gpu.id, "gpu_usable_memory_bytes": self.gpu.usable_memory_bytes,
            "axis": "resolution", "workload": self.workload.to_dict(), "max_image_size": self.max_image_size,
            "image_size_step": self.step_px, "limit_px": self.limit_px,
            "max_image_size_point": point(self.max_point), "max_image_size_plus_step": point(self.over_point),
            "bytes_per_step": self.bytes_per_step, "reason": self.reason, "traces": self.traces,
            "assumptions": list(self.assumptions),
        }

    def __str__(self) -> str:
        return to_text(self)  # gpuplan/report/registry.py: report.advise.render_resolution_fit


def largest_resolution(
    model: str | ModelSource,
    gpu: str | GPU,
    workload: Workload | None = None,
    *,
    limit_px: int | None = None,
    calibration: Calibration | None = None,
    progress: Callable[[str], None] | None = None,
) -> ResolutionFit:
    """The largest square ``--image-size`` of a diffusion pipeline's ``workload`` that fits ``gpu``: the largest
    batch's search (secant on traced points, confirmed by tracing the answer and one step more) along the image
    side, in steps of the pipeline's pixel multiple. Memory grows with the pixels (the side squared), which the
    confirming traces catch."""
    from gpuplan.hardware import GPU as GPUType
    from gpuplan.hardware import get_gpu
    from gpuplan.models.sources import ModelSource as SourceType
    from gpuplan.models.sources import resolve_model
    from gpuplan.workload import MAX_IMAGE_SIZE

    source = model if isinstance(model, SourceType) else resolve_model(model)
    if source.kind != "pipeline":
        raise ConfigError(f"--axis resolution applies to diffusion pipelines; {source.name} is not one (use --axis "
                          "batch, or --axis seq-len for a token model)")
    target_gpu = gpu if isinstance(gpu, GPUType) else get_gpu(str(gpu))
    base = workload or Workload()
    if base.image_size is not None or base.image_width is not None:
        raise ConfigError("--axis resolution searches the image size: drop --image-size (square images are searched)")
    step_px = int(source.spec.family.pixel_multiple)  # type: ignore[attr-defined]
    limit = limit_px if limit_px is not None else MAX_IMAGE_SIZE
    if not step_px <= limit <= MAX_IMAGE_SIZE:
        raise ConfigError(f"image-size limit {limit} is out of range: allowed {step_px}..{MAX_IMAGE_SIZE} pixels")
    source.check_workload(base.with_(image_size=step_px))  # type: ignore[attr-defined]  # frames etc.: one line
    check_workload_on_gpu(base, target_gpu)
    tracer = _Tracer(source, target_gpu, calibration, progress)
    search = _largest_batch(tracer, base, _Axis("image_size", step_px, max(1, limit // step_px)))
    assumptions = (f"largest square image searched in steps of {step_px} px (the pipeline's VAE factor × patch "
                   f"size) at batch {base.batch_size}: two traces give the slope, the answer is confirmed by tracing "
                   f"it and {step_px} px more", *tracer.assumptions)
    return ResolutionFit(
        model=source.name, gpu=target_gpu, workload=base, max_image_size=search.batch * step_px, step_px=step_px,
        max_point=search.point, over_point=search.over, bytes_per_step=int(search.bytes_per_sample),
        traces=tracer.traces, limit_px=limit, assumptions=assumptions, probes=tuple(tracer.probes))
