"""``recommend``: every catalog GPU, the fewest of it that run the workload, ranked by speed and cost.

One trace per workload (per attention-kernel class: flash needs sm_80+, so pre-Ampere GPUs get their
own trace): memory does not depend on the GPU except the CUDA context and cuBLAS workspaces, which
are added per GPU exactly as ``estimate`` does. Time comes from the cost model on each GPU.

Layouts, the simplest that fits (the full planner is gpuplan.parallel's job):

* 1 GPU: the workload as given;
* N > 1 GPUs, training: data parallel with DeepSpeed ZeRO-3, each GPU running the given batch; the
  per-GPU memory and step time are the planner's (``gpuplan.parallel.evaluate`` on a profile of the
  same trace: one sharding model and one communication model for plan and recommend);
* N > 1 GPUs, inference: the weights sharded over N and gathered one block ahead, each forward
  all-gathering them (the communication model of gpuplan.perf.collectives), overlapped with compute.

Counts tried: 1, 2, 4, 8, 16, ... up to ``max_gpus`` (and ``max_gpus`` itself).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from gpuplan.hardware.support import default_precision_for, refusal
from gpuplan.perf.efficiency import generation_key
from gpuplan.perf.roofline import NoRateError
from gpuplan.perf.workload_family import time_interval, workload_family
from gpuplan.presentation import to_text
from gpuplan.trace.cache import layer_counts_of
from gpuplan.units import format_bytes

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from gpuplan.hardware import GPU
    from gpuplan.models.sources import ModelSource
    from gpuplan.perf.summary import Throughput
    from gpuplan.perf.workload_family import TimeInterval
    from gpuplan.trace.step import TracedStep
    from gpuplan.workload import Workload



@dataclass(frozen=True, slots=True)
class Candidate:
    gpu: GPU
    count: int
    fits: bool
    reason: str
    layout: str = ""
    per_gpu_bytes: int = 0
    step_time_s: float | None = None
    throughput: Throughput | None = None
    """Whole job (all GPUs)."""
    cost_per_hour_usd: float | None = None
    cost_per_million_usd: float | None = None
    """$ per million tokens (or samples) at ``throughput``."""
    purchase_usd: float | None = None
    timed: bool = True
    """False: the memory fits but the catalog documents no rate the step's ops run at on this GPU, so
    it is listed (``untimed``) with the reason instead of ranked."""
    interval: TimeInterval | None = None
    """80% prediction interval of ``step_time_s`` (perf/workload_family.py)."""
    within_uncertainty_of: str | None = None
    """The next faster fitting GPU whose interval overlaps this one's: the order of the two is within
    the model's uncertainty, not a ranking."""
    precision: str = ""
    """The precision this GPU was sized and timed in: the workload's, or without --precision the one people
    run on this GPU (hardware.support.default_precision_for: amp-fp16 on a T4, amp-bf16 on an A100)."""
    pipeline: dict[str, Any] | None = None
    """A diffusion pipeline's rung (advise/pipeline.py): offload mode, quantization, host RAM it needs."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu.id,
            "count": self.count,
            "precision": self.precision,
            "tier": self.gpu.tier,
            "fits": self.fits,
            "reason": self.reason,
            "layout": self.layout,
            "per_gpu_bytes": self.per_gpu_bytes,
            "gpu_usable_memory_bytes": self.gpu.usable_memory_bytes,
            "step_time_s": self.step_time_s,
            "step_time_interval_s": self.interval.to_list() if self.interval is not None else None,
            "within_uncertainty_of": self.within_uncertainty_of,
            "throughput": self.throughput,
            "cost_per_hour_usd": self.cost_per_hour_usd,
            "cost_per_million_usd": self.cost_per_million_usd,
            "purchase_usd": self.purchase_usd,
            "timed": self.timed,
            "pipeline": self.pipeline,
        }


@dataclass(frozen=True, slots=True)
class Recommendation:
    model: str
    workload: Workload
    max_gpus: int
    candidates_in: tuple[Candidate, ...]
    """Fitting candidates, fastest step first."""
    candidates_out: tuple[Candidate, ...]
    per_gpu_fixed_bytes: int
    """Model state on one GPU (parameters, gradients, optimizer state at the peak)."""
    per_gpu_batch_bytes: int
    trace_s: float
    traces: int
    assumptions: tuple[str, ...] = ()
    by_cost: tuple[Candidate, ...] = ()
    """Fitting candidates with a known price, cheapest per million tokens/samples first."""
    largest_gpu: str | None = None
    needed_bytes: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    untimed: tuple[Candidate, ...] = ()
    """GPUs the workload fits whose step time cannot be modelled (no documented rate): listed with the
    reason, never ranked, and never the reason the whole ranking fails."""
    precision_per_gpu: bool = False
    """No precision was given: each GPU runs the one people run on it (``Candidate.precision``);
    ``workload.precision`` is then the default class's (sm_90)."""

    @property
    def ok(self) -> bool:
        return bool(self.candidates_in or self.untimed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "workload": self.workload.to_dict(),
            "max_gpus": self.max_gpus,
            "recommendations": [c.to_dict() for c in self.candidates_in],
            "by_cost": [c.to_dict() for c in self.by_cost],
            "excluded": [c.to_dict() for c in self.candidates_out],
            "untimed": [c.to_dict() for c in self.untimed],
            "per_gpu_fixed_bytes": self.per_gpu_fixed_bytes,
            "per_gpu_batch_bytes": self.per_gpu_batch_bytes,
            "trace_s": self.trace_s,
            "traces": self.traces,
            "largest_gpu": self.largest_gpu,
            "needed_bytes": self.needed_bytes,
            "precision_per_gpu": self.precision_per_gpu,
            "assumptions": list(self.assumptions),
        }

    def __str__(self) -> str:
        return to_text(self)  # gpuplan/report/registry.py: report.advise.render_recommendation


def kernel_class(gpu: GPU, workload: Workload | None = None) -> tuple[int, int]:
    """The compute capability whose trace stands for ``gpu``: only the attention kernel choice
    depends on it (trace/cuda_semantics.py: flash from sm_80 in fp16/bf16, memory-efficient from
    sm_50). fp32 attention is memory-efficient on every class and eager/math attention is the same
    everywhere, so those workloads need one trace. GPUs without a compute capability (AMD, Intel,
    Apple) follow estimate's default, sm_90."""
    cc = gpu.compute_capability
    if cc is None or cc >= (8, 0):
        return (9, 0)
    if (
        workload is not None
        and (workload.attention in ("eager", "sdpa-math") or workload.precision in ("fp32", "tf32"))
        and cc >= (5, 0)
    ):
        return (9, 0)
    return (7, 0) if cc >= (5, 0) else (3, 0)


def counts_up_to(max_gpus: int) -> list[int]:
    out, n = [], 1
    while n < max_gpus:
        out.append(n)
        n *= 2
    out.append(max_gpus)
    return out


def _single_gpu(step: TracedStep, gpu: GPU, workload: Workload) -> tuple[int, int]:
    """(what one GPU needs for the step, its CUDA context + workspaces): estimate's arithmetic and
    fit rule (memory/on_gpu.py), nothing of recommend's own."""
    from gpuplan.memory.on_gpu import memory_on_gpu

    mem = memory_on_gpu(step, gpu, trains=workload.trains)
    return mem.min_required_bytes, mem.components["cuda_context"] + mem.components["workspaces"]


def _model_state_bytes(step: TracedStep) -> int:
    c = step.tensor_components
    return c.get("parameters", 0) + c.get("gradients", 0) + c.get("optimizer_state", 0)


class _Sharded:
    """ZeRO-3 over n GPUs, each running the given batch. Training: the planner's evaluator
    (gpuplan.parallel: DeepSpeed ZeRO-3 per-rank memory and step time on the cluster topology) on a
    profile of the same trace — one sharding model for plan and recommend. Inference: the weights
    are sharded and gathered one block ahead; the rest is the single-GPU step (no gradients or
    optimizer state to shard)."""

    def __init__(self, source: ModelSource, step: TracedStep, traced: Workload, cls: tuple[int, int]) -> None:
        self.source = source
        self.step = step
        self.traced = traced
        self.cls = cls
        self._fb_step: TracedStep | None = None
        self._module_step: tuple[TracedStep | None] | None = None
        self.traces = 0

    def _profile_step(self) -> TracedStep:
        """A step of one micro-batch (the planner's profile is per micro-batch)."""
        if self.traced.grad_accum == 1:
            return self.step
        if self._fb_step is None:
            from gpuplan.trace.step import trace_step

            self._fb_step = trace_step(self.source, self.traced.with_(grad_accum=1), compute_capability=self.cls)
            self.traces += 1
        return self._fb_step

    def _module_dtype_step(self) -> TracedStep | None:
        """The same micro-batch with the model in 16 bits, whose activations ZeRO-3 holds (parallel/profile.py)."""
        if self._module_step is None:
            from gpuplan.parallel.profile import module_dtype_step

            self._module_step = (module_dtype_step(self.source, self.traced.with_(grad_accum=1), self.cls),)
            self.traces += self._module_step[0] is not None
        return self._module_step[0]

    def why_not(self) -> str | None:
        """Why sharding over several GPUs is not modelled for this model (None: it is)."""
        if self.traced.trains and len(layer_counts_of(self.source)) > 1:
            return "sharded layouts of multi-stack (encoder-decoder) models are not modelled"
        return None

    def evaluate(self, gpu: GPU, n: int, workload: Workload, fixed_bytes: int) -> tuple[int, float | None]:
        """(per-GPU bytes, step seconds: the evaluator's, or for inference the weight gathers that
        prefetching hides behind compute up to the single-GPU time) on ``n`` GPUs."""
        from gpuplan.parallel.evaluate import Context, evaluate
        from gpuplan.parallel.forward import sharded_forward
        from gpuplan.parallel.layout import Layout, Zero
        from gpuplan.parallel.profile import profile_from_step
        from gpuplan.parallel.topology import make_topology

        topo = make_topology(gpu, n)
        if not workload.trains:
            # every forward (the prompt, then each new token) gathers the weights once, prefetched
            forwards = workload.new_tokens if workload.mode == "generate" else 1
            shard = sharded_forward(self.step, topo, n, forwards=forwards)
            return shard.bytes_per_gpu + fixed_bytes, shard.gather_s
        prof = profile_from_step(self._profile_step(), self.source, self.traced.with_(grad_accum=1), gpu,
                                 module_dtype_step=self._module_dtype_step)
        lay = Layout(dp=n, tp=1, pp=1, micro_batch_size=workload.batch_size, grad_accum=workload.grad_accum,
                     sharding=Zero(3), checkpointing=workload.checkpointing)
        ev = evaluate(Context(prof, topo, gpu.usable_memory_bytes, fixed_bytes), lay)
        return ev.per_gpu_peak_bytes, ev.step_time_s


def mark_overlaps(ranked: list[Candidate]) -> list[Candidate]:
    """``ranked`` (fastest first) with ``within_uncertainty_of`` set where a candidate's 80% interval
    overlaps the next faster one's: the model cannot tell those two apart."""
    out: list[Candidate] = []
    for i, c in enumerate(ranked):
        prev = ranked[i - 1] if i else None
        if (prev is not None and c.interval is not None and prev.interval is not None
                and c.interval.low_s <= prev.interval.high_s):
            c = replace(c, within_uncertainty_of=prev.gpu.id)
        out.append(c)
    return out


def recommend(
    model: str | ModelSource,
    workload: Workload | None = None,
    *,
    max_gpus: int = 8,
    budget_usd: float | None = None,
    prices: dict[str, float] | None = None,
    gpus: list[GPU] | None = None,
    progress: Callable[[str], None] | None = None,
    precision_per_gpu: bool = False,
) -> Recommendation:
    """Rank every catalog GPU (or ``gpus``) for ``workload``: see the module docstring. ``progress``
    is called with a short line before each trace and each GPU. ``precision_per_gpu`` (the command
    line's default without --precision): each GPU is sized and timed in the precision people run on it
    (hardware.support.default_precision_for), not ``workload.precision``, so pre-Ampere GPUs are ranked
    in amp-fp16 rather than left out for lacking bf16."""
    from gpuplan.errors import ConfigError
    from gpuplan.hardware import all_gpus
    from gpuplan.models.sources import ModelSource as SourceType
    from gpuplan.models.sources import resolve_model
    from gpuplan.perf.summary import seq_len_of
    from gpuplan.trace.step import trace_step
    from gpuplan.workload import Workload as WorkloadType

    if max_gpus < 1 or max_gpus > 100_000:
        raise ConfigError(f"--max-gpus {max_gpus} is out of range: allowed 1..100000")
    if budget_usd is not None and budget_usd <= 0:
        raise ConfigError(f"--budget-usd {budget_usd} must be positive")
    source = model if isinstance(model, SourceType) else resolve_model(model)
    from gpuplan.estimate import with_stated_seq_len

    if source.kind == "pipeline":
        return _recommend_pipeline(source, workload or WorkloadType(), budget_usd=budget_usd, prices=prices or {},
                                   gpus=gpus, progress=progress, precision_per_gpu=precision_per_gpu)
    w = with_stated_seq_len(source, workload or WorkloadType())
    catalog = [g for g in (gpus if gpus is not None else all_gpus()) if not g.is_mig]
    prices = prices or {}
    t0 = time.perf_counter()
    seq = seq_len_of(source, w)

    def on(gpu: GPU) -> Workload:
        """The workload as ``gpu`` runs it (its precision, without one given)."""
        return w.with_(precision=default_precision_for(w.mode, gpu)) if precision_per_gpu else w

    # one trace per (precision, attention-kernel class) that some GPU runs; sm_90 first
    keys = sorted({(kernel_class(g, on(g)), on(g).precision) for g in catalog if _dtype_ok(g, on(g)) is None},
                  reverse=True)
    steps: dict[tuple[tuple[int, int], str], TracedStep] = {}
    for cls, precision in keys:
        if progress is not None:
            progress(f"recommend: tracing {source.name} for sm_{cls[0]}{cls[1]} kernels"
                     + (f" in {precision}" if precision_per_gpu else ""))
        steps[cls, precision] = trace_step(source, _traced_workload(w.with_(precision=precision), seq)[0],
                                           compute_capability=cls)
    trace_s = time.perf_counter() - t0
    shardings: dict[tuple[tuple[int, int], str], _Sharded] = {}
    task = str(getattr(source, "task", "custom"))
    ins: list[Candidate] = []
    outs: list[Candidate] = []
    untimed: list[Candidate] = []
    for gpu, wg in _runnable(catalog, on, outs, progress):
        key = (kernel_class(gpu, wg), wg.precision)
        step = steps[key]
        traced_w, gen = _traced_workload(wg, seq)
        if key not in shardings:
            shardings[key] = _Sharded(source, step, traced_w, key[0])
        timer = _Timer(wg, traced_w, gen, task, seq)
        try:
            cand = _best_count(step, gpu, wg, max_gpus, prices.get(gpu.id), timer, shardings[key])
        except NoRateError as exc:  # the sharded layouts are sized by a timed evaluator
            outs.append(Candidate(gpu, 0, False, _untimed_reason(exc, gpu) + "; sharded layouts are sized by "
                                  "the timed planner, so none could be tried", timed=False, precision=wg.precision))
            continue
        cand = replace(cand, precision=wg.precision)
        if not cand.timed:
            untimed.append(cand)
            continue
        cand = _within_budget(cand, budget_usd, bool(prices))
        family = workload_family(task, w.mode, cand.count, step.ops)
        cand = replace(cand, interval=time_interval(cand.step_time_s, family, generation_key(gpu)))
        (ins if cand.fits else outs).append(cand)
    ins, outs, by_cost = _ranked(ins, outs)
    # the header's model state and activations: the default class's trace (sm_90, the workload's precision)
    any_step = steps.get(((9, 0), w.precision)) or next(iter(steps.values()), None)
    fixed = _model_state_bytes(any_step) if any_step else 0
    batch_bytes = ((any_step.min_reserved_bytes or any_step.reserved_peak_bytes) - fixed) if any_step else 0
    largest = needed = None
    # the largest GPU that could have run it: right dtype, and a peer link when sharding was allowed
    usable_out = [c for c in outs if c.per_gpu_bytes > 0]
    shardable = [c for c in usable_out if max_gpus == 1 or c.gpu.intra_node_gb_per_s_per_direction]
    if not ins and not untimed and (shardable or usable_out):
        big_out = max(shardable or usable_out, key=lambda c: c.gpu.usable_memory_bytes)
        largest = big_out.gpu.id
        needed = big_out.per_gpu_bytes
    notes = [
        "one trace per attention-kernel class (sm_80+ / older); memory per GPU = traced peak + that GPU's "
        "CUDA context and cuBLAS workspaces",
        "N > 1: data parallel with DeepSpeed ZeRO-3, each GPU running the given batch: per-GPU memory and "
        "step time from the planner's evaluator (as `gpuplan plan --zero 3 --tp 1 --pp 1`), 8 GPUs per node, "
        "the network between nodes by GPU generation (see `gpuplan plan` assumptions)",
        *(
            [
                f"generate: traced with {DECODE_STEPS_TRACED} decode steps; the KV cache of the other new "
                "tokens is added to the memory and the decode time scaled to all new tokens"
            ]
            if _traced_workload(w, seq)[1] is not None
            else []
        ),
        *(
            ["no --precision: each GPU sized and timed in the precision people run on it (autocast bf16 from "
             "Ampere on, fp16 with a gradient scaler before; the weights in that type for inference), one trace "
             "per precision"]
            if precision_per_gpu
            else []
        ),
        "ranked by step time (fewest GPUs that fit, per GPU model)"
        + ("; cost from --prices ($/hour)" if prices else "; no --prices: cost columns empty"),
    ]
    if any_step is not None:
        from gpuplan.perf.efficiency import DEFAULT_EFFICIENCY

        notes.extend(DEFAULT_EFFICIENCY.describe())
    return Recommendation(
        model=source.name,
        workload=w,
        max_gpus=max_gpus,
        candidates_in=tuple(ins),
        candidates_out=tuple(outs),
        per_gpu_fixed_bytes=fixed,
        per_gpu_batch_bytes=batch_bytes,
        trace_s=trace_s,
        traces=len(steps) + sum(sh.traces for sh in shardings.values()),
        assumptions=tuple(notes),
        by_cost=by_cost,
        largest_gpu=largest,
        needed_bytes=needed,
        untimed=tuple(untimed),
        precision_per_gpu=precision_per_gpu,
    )


def _runnable(catalog: list[GPU], on: Callable[[GPU], Workload], outs: list[Candidate],
              progress: Callable[[str], None] | None) -> Iterator[tuple[GPU, Workload]]:
    """(GPU, the workload as it runs it) for the GPUs of ``catalog`` that can run its dtypes, one by one (with a
    progress line); the others go to ``outs`` with the reason."""
    for i, gpu in enumerate(catalog, 1):
        if progress is not None:
            progress(f"recommend: {gpu.id} ({i}/{len(catalog)})")
        wg = on(gpu)
        bad = _dtype_ok(gpu, wg)
        if bad is None:
            yield gpu, wg
        else:
            outs.append(Candidate(gpu, 0, False, bad, precision=wg.precision))


def _within_budget(cand: Candidate, budget_usd: float | None, priced: bool) -> Candidate:
    """``cand``, moved out with the reason when it costs more than ``budget_usd`` ($/hour with --prices, else the
    purchase price)."""
    cost = cand.cost_per_hour_usd if priced else cand.purchase_usd
    if not cand.fits or budget_usd is None or cost is None or cost <= budget_usd:
        return cand
    what = "$/hour" if priced else "purchase $"
    return replace(cand, fits=False, reason=f"over budget: {cost:,.2f} {what} > {budget_usd:,.2f}")


def _ranked(ins: list[Candidate], outs: list[Candidate]
            ) -> tuple[list[Candidate], list[Candidate], tuple[Candidate, ...]]:
    """(fitting candidates fastest first with their overlaps marked, the rest largest GPU first, the priced
    fitting ones cheapest per million first)."""
    ins = mark_overlaps(sorted(ins, key=lambda c: (c.step_time_s or float("inf"), c.count, c.gpu.id)))
    outs = sorted(outs, key=lambda c: -c.gpu.usable_memory_bytes)
    by_cost = tuple(sorted((c for c in ins if c.cost_per_million_usd is not None),
                           key=lambda c: (c.cost_per_million_usd or 0.0, c.step_time_s or 0.0)))
    return ins, outs, by_cost


def _recommend_pipeline(source: ModelSource, w: Workload, *, budget_usd: float | None, prices: dict[str, float],
                        gpus: list[GPU] | None, progress: Callable[[str], None] | None,
                        precision_per_gpu: bool = False) -> Recommendation:
    """A diffusion pipeline on one GPU of each type: the first rung of advise/pipeline.py's ladder (offload
    modes, then quantized weights) that fits, timed as ``estimate`` times it (one GPU: sharding a pipeline
    over several is not modelled)."""
    from gpuplan.advise.pipeline import Traces, first_fit, ladder
    from gpuplan.hardware import all_gpus
    from gpuplan.units import format_bytes

    source.check_workload(w)  # type: ignore[attr-defined]  # one line for a bad size, before any trace

    def on(gpu: GPU) -> Workload:  # as recommend() runs a model: the precision people run on the GPU, unasked
        return w.with_(precision=default_precision_for(w.mode, gpu)) if precision_per_gpu else w

    catalog = [g for g in (gpus if gpus is not None else all_gpus()) if not g.is_mig]
    traces = Traces(source)
    t0 = time.perf_counter()
    ins: list[Candidate] = []
    outs: list[Candidate] = []
    untimed: list[Candidate] = []
    rungs = ladder(w)
    for gpu, wg in _runnable(catalog, on, outs, progress):
        rungs = ladder(wg)
        rung, est, skipped = first_fit(source, traces, gpu, rungs, kernel_class(gpu, wg))
        usable = gpu.usable_memory_bytes
        if rung is None or est is None:
            need = est.min_required_bytes if est is not None else 0
            tried = rungs[-1].label if est is not None else "every rung"
            why = f"needs {format_bytes(need)} even with {tried}, has {format_bytes(usable)}" if est is not None \
                else "; ".join(skipped) or "no rung could be traced"
            outs.append(Candidate(gpu, 1, False, why, per_gpu_bytes=need, precision=wg.precision))
            continue
        need = est.min_required_bytes
        price = prices.get(gpu.id)
        tp = est.throughput
        per_m = price / (tp["value"] * 3600) * 1e6 if price is not None and tp and tp["value"] > 0 else None
        pipe = {**rung.to_dict(), "host_memory_bytes": est.pipeline.host_memory_bytes if est.pipeline else 0}
        cand = Candidate(gpu, 1, True, f"needs {format_bytes(need)} of {format_bytes(usable)} with {rung.label}",
                         f"single GPU, {rung.label}", need, est.step_time_s, tp, price, per_m,
                         gpu.launch_price_usd or None, timed=est.timing is not None,
                         interval=est.timing.interval if est.timing is not None else None, pipeline=pipe,
                         precision=wg.precision)
        if not cand.timed:
            untimed.append(replace(cand, reason=f"fits with {rung.label} but {est.time_unknown}"))
            continue
        cand = _within_budget(cand, budget_usd, bool(prices))
        (ins if cand.fits else outs).append(cand)
    ins, outs, by_cost = _ranked(ins, outs)
    largest = needed = None
    sized = [c for c in outs if c.per_gpu_bytes > 0]
    if not ins and not untimed and sized:
        big = max(sized, key=lambda c: c.gpu.usable_memory_bytes)
        largest, needed = big.gpu.id, big.per_gpu_bytes
    notes = ("a diffusion pipeline on one GPU of each type; per GPU the first of: "
             + " → ".join(r.label for r in rungs) + " that fits (advise/pipeline.py), memory and time as "
             "`gpuplan estimate` gives them for that setting",
             "ranked by the time of one generation" + ("; cost from --prices ($/hour), $ per million images "
                                                       "(videos)" if prices else "; no --prices: cost columns empty"))
    base = next((st for st in traces.steps.values() if not isinstance(st, Exception)), None)
    fixed = _model_state_bytes(base) if base is not None else 0
    batch_bytes = (base.min_reserved_bytes or base.reserved_peak_bytes) - fixed if base is not None else 0
    return Recommendation(model=source.name, workload=w, max_gpus=1, candidates_in=tuple(ins),
                          candidates_out=tuple(outs), per_gpu_fixed_bytes=fixed, per_gpu_batch_bytes=batch_bytes,
                          trace_s=time.perf_counter() - t0, traces=len(traces), assumptions=notes, by_cost=by_cost,
                          largest_gpu=largest, needed_bytes=needed, untimed=tuple(untimed))


def _untimed_reason(exc: NoRateError, gpu: GPU) -> str:
    """The catalog's missing rate, said of this GPU in a list of GPUs."""
    return str(exc).replace(f"{gpu.id} has", "has")


def _dtype_ok(gpu: GPU, w: Workload) -> str | None:
    found = refusal(w, gpu)
    return found.reason if found is not None else None


DECODE_STEPS_TRACED = 8


def _traced_workload(w: Workload, seq: int | None) -> tuple[Workload, tuple[float, float] | None]:
    """Generation is traced with DECODE_STEPS_TRACED decode steps (the prompt unchanged); the time
    scales that restore the requested number of new tokens are returned alongside, and the KV cache
    of the untraced tokens is added to the memory (``_Timer.extra_bytes``)."""
    if w.mode != "generate" or w.new_tokens <= DECODE_STEPS_TRACED or not seq:
        return w, None
    traced = w.with_(new_tokens=DECODE_STEPS_TRACED)
    return traced, (1.0, (w.new_tokens - 1) / (DECODE_STEPS_TRACED - 1))


@dataclass(frozen=True, slots=True)
class _Timer:
    workload: Workload
    traced: Workload
    gen_scale: tuple[float, float] | None
    task: str
    seq: int | None

    def extra_bytes(self, step: TracedStep) -> int:
        """KV cache of the new tokens the trace did not run (an upper bound on the peak's growth:
        exact when the peak is the last decode step, as it is once the cache dominates)."""
        if self.gen_scale is None or not self.seq:
            return 0
        per_token = step.tensor_components.get("kv_cache", 0) / self.seq
        return int(per_token * (self.workload.new_tokens - self.traced.new_tokens))

    def __call__(self, step: TracedStep, gpu: GPU) -> tuple[float, Throughput]:
        """(step time on one GPU, its throughput) for the requested workload."""
        from gpuplan.perf.step_time import step_time
        from gpuplan.perf.summary import throughput_of

        st = step_time(step, gpu, self.traced)
        if self.gen_scale is None:
            return st.total_s, throughput_of(st, self.workload, task=self.task, seq_len=self.seq)
        prefill = st.by_phase_s.get("prefill", 0.0) * self.gen_scale[0]
        decode = st.by_phase_s.get("decode", 0.0) * self.gen_scale[1]
        total = prefill + decode
        w = self.workload
        return total, {"value": w.batch_size * w.new_tokens / total if total else 0.0, "unit": "tokens/s"}


def _best_count(
    step: TracedStep,
    gpu: GPU,
    w: Workload,
    max_gpus: int,
    price_per_hour: float | None,
    timer: _Timer,
    sharded: _Sharded,
) -> Candidate:
    single, fixed = _single_gpu(step, gpu, w)
    extra = timer.extra_bytes(step)
    single += extra
    usable = gpu.usable_memory_bytes
    need = single
    why_single = None if gpu.intra_node_gb_per_s_per_direction else "no peer-to-peer link"
    why_single = why_single or sharded.why_not()
    for n in counts_up_to(max_gpus):
        sharded_s: float | None = None
        if n == 1:
            need = single
        else:
            if why_single is not None:
                break  # single device only (Apple SoCs; models the sharding model does not cover)
            need, sharded_s = sharded.evaluate(gpu, n, w, fixed)
            need += extra
        if need <= usable:
            try:
                one_s, one = timer(step, gpu)
            except NoRateError as exc:
                layout = "single GPU" if n == 1 else f"ZeRO-3 × {n}"
                return Candidate(gpu, n, True, f"fits ({format_bytes(need)} per GPU of {format_bytes(usable)}) but "
                                 + _untimed_reason(exc, gpu), layout, need, timed=False)
            t = max(one_s, sharded_s) if sharded_s is not None else one_s
            tp: Throughput = {"value": one["value"] * n * one_s / t, "unit": one["unit"]}
            cost_h = price_per_hour * n if price_per_hour is not None else None
            per_m = cost_h / (tp["value"] * 3600) * 1e6 if cost_h is not None and tp["value"] > 0 else None
            layout = "single GPU" if n == 1 else f"ZeRO-3 × {n}"
            purchase = gpu.launch_price_usd * n if gpu.launch_price_usd else None
            reason = f"needs {format_bytes(need)} per GPU, has {format_bytes(usable)}"
            return Candidate(gpu, n, True, reason, layout, need, t, tp, cost_h, per_m, purchase)
    where = f" even sharded over {max_gpus}" if max_gpus > 1 and why_single is None else ""
    return Candidate(
        gpu,
        max_gpus if where else 1,
        False,
        f"needs {format_bytes(need)}{where}, has {format_bytes(usable)}"
        + (f" ({why_single})" if max_gpus > 1 and why_single else ""),
        per_gpu_bytes=need,
    )


# ---- serving (recommend --mode serve): GPUs × counts for a serving target, sized by gpuplan.serve ----

@dataclass(frozen=True, slots=True)
class ServeCandidate:
    """The fewest GPUs of one type (tp × dp × replicas) that meet the serving target, or why none does."""

    gpu: GPU
    tp: int
    fits: bool
    reason: str
    replicas: int = 0
    gpus: int = 0
    max_concurrency: int = 0
    decode_tokens_per_s: float = 0.0
    ttft_s: float = 0.0
    cost_per_hour_usd: float | None = None
    usd_per_million_output_tokens: float | None = None
    command: str = ""
    dp: int = 1
    ep: int = 1
    pp: int = 1

    def to_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu.id, "tp": self.tp, "pp": self.pp, "dp": self.dp, "ep": self.ep, "fits": self.fits,
                "reason": self.reason,
                "replicas": self.replicas, "gpus": self.gpus, "max_concurrency": self.max_concurrency,
                "decode_tokens_per_s": self.decode_tokens_per_s, "ttft_s": self.ttft_s,
                "cost_per_hour_usd": self.cost_per_hour_usd,
                "usd_per_million_output_tokens": self.usd_per_million_output_tokens, "command": self.command}


@dataclass(frozen=True, slots=True)
class ServeRecommendation:
    model: str
    engine: str
    target: dict[str, Any]
    candidates_in: tuple[ServeCandidate, ...]
    """Meeting the target: fewest GPUs first (cheapest first with prices)."""
    candidates_out: tuple[ServeCandidate, ...]
    traces: int
    assumptions: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return bool(self.candidates_in)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "mode": "serve", "engine": self.engine, "target": self.target,
                "recommendations": [c.to_dict() for c in self.candidates_in],
                "excluded": [c.to_dict() for c in self.candidates_out], "traces": self.traces,
                "assumptions": list(self.assumptions)}

    def __str__(self) -> str:
        return to_text(self)  # gpuplan/report/registry.py: report.serve.render_serve_recommendation


def recommend_serve(
    model: str | ModelSource,
    *,
    engine: str = "vllm",
    context: int | None = None,
    concurrency: int | None = None,
    input_len: int | None = None,
    output_len: int | None = None,
    rate: float | None = None,
    kv_cache_dtype: str = "auto",
    quantization: str = "none",
    max_gpus: int = 8,
    prices: dict[str, float] | None = None,
    gpus: list[GPU] | None = None,
    progress: Callable[[str], None] | None = None,
) -> ServeRecommendation:
    """For each catalog GPU, the fewest GPUs (1, 2, 4, ... ``max_gpus``) one of whose layouts
    (``serve.layouts.search_layouts``: tp × pp × dp, MoE experts TP-split or expert-parallel) starts and holds
    ``concurrency`` sequences of ``context`` tokens, or, with a ``rate``, the layout needing the fewest GPUs in
    all (instances × tp × dp). One profile-run trace per shape and kernel class."""
    from gpuplan.errors import ConfigError, GpuplanError
    from gpuplan.hardware import all_gpus
    from gpuplan.models.sources import ModelSource as SourceType
    from gpuplan.models.sources import resolve_model
    from gpuplan.serve.layouts import search_layouts

    if max_gpus < 1 or max_gpus > 1024:
        raise ConfigError(f"--max-gpus {max_gpus} is out of range for serving: allowed 1..1024")
    source = model if isinstance(model, SourceType) else resolve_model(model)
    from gpuplan.models.base import refuse_pipeline

    refuse_pipeline(source, "recommend --mode serve", "use `gpuplan recommend MODEL --mode infer` (GPUs for its "
                    "generations) or `gpuplan serve MODEL --gpu GPU` (images per hour)")
    catalog = [g for g in (gpus if gpus is not None else all_gpus()) if not g.is_mig]
    prices = prices or {}
    profiles: dict[tuple[Any, ...], Any] = {}
    ins: list[ServeCandidate] = []
    outs: list[ServeCandidate] = []
    for i, gpu in enumerate(catalog, 1):
        if progress is not None:
            progress(f"recommend: {gpu.id} ({i}/{len(catalog)})")
        best: ServeCandidate | None = None
        why = "no layout of up to --max-gpus GPUs holds the target"
        for n in counts_up_to(max_gpus):
            if n > 1 and not gpu.intra_node_gb_per_s_per_direction:
                why = f"{gpu.id} has no peer link for tensor parallelism and one GPU is not enough"
                break
            try:
                search = search_layouts(source, gpu=gpu, gpus=n, engine=engine, context=context,
                                        concurrency=concurrency, input_len=input_len, output_len=output_len,
                                        rate=rate, kv_cache_dtype=kv_cache_dtype, quantization=quantization,
                                        prices=prices, profiles=profiles, trace_compute_capability=kernel_class(gpu))
            except GpuplanError as exc:
                why = str(exc)
                break
            chosen = search.chosen
            if chosen is None or chosen.result is None:
                tried = search.outcomes[0] if search.outcomes else None
                why = tried.reason if tried is not None else why
                if tried is not None and tried.result is not None and tried.result.ok:
                    why = f"at most {tried.result.max_concurrency * tried.dp:,} sequences of " \
                          f"{tried.result.context:,} tokens on {n}× {gpu.id}"
                continue
            r = chosen.result
            instances = -(-r.rate.replicas // chosen.dp) if r.rate else 1
            total = instances * n
            price = prices.get(gpu.id)
            cand = ServeCandidate(gpu, chosen.tp, True, r.reason, instances, total, r.max_concurrency * chosen.dp,
                                  r.decode_tokens_per_s * chosen.dp, r.prefill.seconds,
                                  price * total if price is not None else None,
                                  r.rate.usd_per_million_output_tokens if r.rate else None, r.command,
                                  dp=chosen.dp, ep=chosen.ep, pp=chosen.pp)
            if best is None or cand.gpus < best.gpus:
                best = cand
            if rate is None:
                break  # the fewest GPUs that hold the concurrency
        if best is not None:
            ins.append(best)
        else:
            outs.append(ServeCandidate(gpu, 0, False, why))
    if prices:
        ins.sort(key=lambda c: (c.cost_per_hour_usd is None, c.cost_per_hour_usd or 0.0, c.gpus, c.gpu.id))
    else:
        ins.sort(key=lambda c: (c.gpus, -c.decode_tokens_per_s, c.gpu.id))
    target = {"context": context, "concurrency": concurrency, "input_len": input_len, "output_len": output_len,
              "rate": rate, "kv_cache_dtype": kv_cache_dtype, "quantization": quantization, "max_gpus": max_gpus}
    notes = ("per GPU type: the fewest GPUs one of whose layouts (tp × pp × dp; MoE experts TP-split or expert-"
             "parallel; gpuplan serve --gpus N) starts and holds the target, the best layout by goodput per GPU "
             "(with --rate: the layout needing the fewest GPUs, instances × tp × pp × dp)",
             "ranked by $/hour of all GPUs with --prices, else by GPU count then decode tokens/s")
    return ServeRecommendation(source.name, engine, target, tuple(ins), tuple(outs), len(profiles), notes)
